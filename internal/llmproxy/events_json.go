package llmproxy

import (
	"math"
	"strconv"

	"github.com/agentplane/agentplane/internal/jsonstr"
)

// AppendJSON appends d encoded exactly as encoding/json encodes it (field
// order, omitempty, number format, escaping). Every proxied call is
// recorded, and reflection-based encoding was a tenth of the proxy's own
// CPU per call (issue 13); this does the same without reflection. The test
// holds it to json.Marshal byte for byte.
func (d *CallDone) AppendJSON(b []byte) []byte {
	b = append(b, `{"call_id":`...)
	b = jsonstr.Append(b, d.CallID)
	b = append(b, `,"started_at":`...)
	b = strconv.AppendInt(b, d.StartedAt, 10)
	b = append(b, `,"model":`...)
	b = jsonstr.Append(b, d.Model)
	if d.UpstreamModel != "" {
		b = append(b, `,"upstream_model":`...)
		b = jsonstr.Append(b, d.UpstreamModel)
	}
	b = append(b, `,"endpoint":`...)
	b = jsonstr.Append(b, d.Endpoint)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, d.Stream)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(d.Status), 10)
	b = append(b, `,"outcome":`...)
	b = jsonstr.Append(b, d.Outcome)
	if d.Upstream != "" {
		b = append(b, `,"upstream":`...)
		b = jsonstr.Append(b, d.Upstream)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	b = append(b, `,"latency_ms":`...)
	b = appendFloat(b, d.LatencyMS)
	b = append(b, `,"ttft_ms":`...)
	b = appendFloat(b, d.TTFTMS)
	if d.ProxyOverheadMS != 0 {
		b = append(b, `,"proxy_overhead_ms":`...)
		b = appendFloat(b, d.ProxyOverheadMS)
	}
	for _, f := range [...]struct {
		name string
		n    int64
	}{{`,"prompt_tokens":`, d.PromptTokens}, {`,"completion_tokens":`, d.CompletionTokens}, {`,"cached_tokens":`, d.CachedTokens},
		{`,"reasoning_tokens":`, d.ReasoningTokens}, {`,"total_tokens":`, d.TotalTokens}} {
		b = append(b, f.name...)
		b = strconv.AppendInt(b, f.n, 10)
	}
	b = append(b, `,"estimated_cost":`...)
	b = appendFloat(b, d.EstimatedCost)
	b = append(b, `,"price":`...)
	if d.Price == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"input":`...)
		b = appendFloat(b, d.Price.Input)
		b = append(b, `,"cached_input":`...)
		b = appendFloat(b, d.Price.CachedInput)
		b = append(b, `,"output":`...)
		b = appendFloat(b, d.Price.Output)
		b = append(b, '}')
	}
	b = append(b, `,"partial":`...)
	b = strconv.AppendBool(b, d.Partial)
	b = append(b, `,"chunks":`...)
	b = strconv.AppendInt(b, int64(d.Chunks), 10)
	if d.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = jsonstr.Append(b, d.Error.Code)
		b = append(b, `,"message":`...)
		b = jsonstr.Append(b, d.Error.Message)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendFloat formats f as encoding/json does (shortest repr, exponent
// form outside [1e-6, 1e21), two-digit exponents trimmed). NaN and ±Inf,
// which json refuses, are written as 0: no recorded measure can be one.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
