package fakellm

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
)

type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     int             `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// embeddingInputs turns input (a string, strings, tokens or token lists)
// into one text per embedding.
func embeddingInputs(raw json.RawMessage) ([]string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, true
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return ss, len(ss) > 0
	}
	var toks []int
	if json.Unmarshal(raw, &toks) == nil {
		return []string{string(raw)}, len(toks) > 0
	}
	var lists [][]int
	if json.Unmarshal(raw, &lists) == nil {
		out := make([]string, len(lists))
		for i, l := range lists {
			b, _ := json.Marshal(l)
			out[i] = string(b)
		}
		return out, len(out) > 0
	}
	return nil, false
}

// vector is a deterministic unit vector derived from text.
func vector(text string, dims int) []float32 {
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		h := fnv.New64a()
		h.Write([]byte(text))
		h.Write([]byte{byte(i), byte(i >> 8)})
		x := float64(h.Sum64()%20001)/10000 - 1
		v[i] = float32(x)
		norm += x * x
	}
	if norm > 0 {
		n := float32(math.Sqrt(norm))
		for i := range v {
			v[i] /= n
		}
	}
	return v
}

func (ex *exchange) embeddings() {
	var req embeddingsRequest
	if err := json.Unmarshal(ex.body, &req); err != nil {
		ex.error(http.StatusBadRequest, "invalid_request_error", "invalid_json", "We could not parse the JSON body of your request.")
		return
	}
	inputs, ok := embeddingInputs(req.Input)
	if req.Model == "" || !ok {
		ex.error(http.StatusBadRequest, "invalid_request_error", "invalid_value", "'input' and 'model' are required")
		return
	}
	dims := req.Dimensions
	if dims <= 0 {
		dims = 8
	}
	data := make([]embedding, len(inputs))
	tokens := 0
	for i, in := range inputs {
		tokens += max(1, words(in))
		v := vector(in, dims)
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
			}
			data[i] = embedding{Object: "embedding", Index: i, Embedding: base64.StdEncoding.EncodeToString(b)}
		} else {
			// Print as float32 so the JSON matches what a float32 model emits.
			nums := make([]json.Number, len(v))
			for j, f := range v {
				nums[j] = json.Number(strconv.FormatFloat(float64(f), 'g', -1, 32))
			}
			data[i] = embedding{Object: "embedding", Index: i, Embedding: nums}
		}
	}
	ex.writeJSON(http.StatusOK, struct {
		Object string      `json:"object"`
		Data   []embedding `json:"data"`
		Model  string      `json:"model"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}{Object: "list", Data: data, Model: req.Model, Usage: struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}{tokens, tokens}})
}
