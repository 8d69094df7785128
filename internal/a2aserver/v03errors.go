package a2aserver

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/a2aproject/a2a-go/v2/errordetails"
)

// v03Writer mends the JSON-RPC errors of a2a-go's v0.3 binding. That binding
// encodes error.data the v1.0 way — an array of typed details
// ([{"@type":"…ErrorInfo","reason":"TASK_NOT_FOUND",…}]) — where v0.3
// clients (a2a-go v0.3 among them) expect an object and then fail to decode
// the whole answer: they could tell no refusal from a broken server. The
// binding writes each answer, and each SSE event, with one Write, so a write
// that is an error answer is rewritten whole with data as an object: the
// platform's details ({code, …}) and the A2A reason. Only for clients that
// send no A2A-Version header: that header came with v1.0, and a2a-go v2's
// own v0.3 transport, which sends it ("0.3"), reads the array and fails on
// an object.
type v03Writer struct{ http.ResponseWriter }

func (w v03Writer) Write(p []byte) (int, error) {
	q, ok := v03Error(p)
	if !ok {
		return w.ResponseWriter.Write(p)
	}
	if _, err := w.ResponseWriter.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush lets the binding stream (its SSE writer needs an http.Flusher).
func (w v03Writer) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w v03Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	sseData     = []byte("data: ")
	errorMember = []byte(`"error":{`)
	arrayData   = []byte(`"data":[`)
)

// v03Error returns p — a JSON-RPC answer, bare or as an SSE "data: " line —
// with its error's data array turned into an object, or false when p is
// something else (results, SSE ids, keep-alives: left as they are).
func v03Error(p []byte) ([]byte, bool) {
	if !bytes.Contains(p, errorMember) || !bytes.Contains(p, arrayData) {
		return nil, false
	}
	prefix := []byte(nil)
	body := p
	if bytes.HasPrefix(body, sseData) {
		prefix, body = sseData, body[len(sseData):]
	}
	trimmed := bytes.TrimRight(body, "\r\n")
	suffix := body[len(trimmed):]
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int              `json:"code"`
			Message string           `json:"message"`
			Data    []map[string]any `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(trimmed, &resp) != nil || resp.JSONRPC == "" || resp.Error == nil {
		return nil, false
	}
	data := map[string]any{}
	reason := ""
	for _, d := range resp.Error.Data {
		t, _ := d["@type"].(string)
		if t == errordetails.ErrorInfoType {
			reason, _ = d["reason"].(string)
			continue
		}
		for k, v := range d {
			if k != "@type" {
				data[k] = v
			}
		}
	}
	if reason != "" {
		data["reason"] = reason
	}
	if len(data) == 0 { // as a2a-go v0.3's own server words a bare error
		data["error"] = resp.Error.Message
	}
	if resp.ID == nil {
		resp.ID = json.RawMessage("null")
	}
	out, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{resp.JSONRPC, resp.ID, map[string]any{"code": resp.Error.Code, "message": resp.Error.Message, "data": data}})
	if err != nil {
		return nil, false
	}
	return append(append(append([]byte(nil), prefix...), out...), suffix...), true
}
