package llmproxy

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func checkCallDoneJSON(t *testing.T, d CallDone) {
	t.Helper()
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.AppendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON\n%s\njson.Marshal\n%s", got, want)
	}
}

func TestCallDoneAppendJSONMatchesEncodingJSON(t *testing.T) {
	full := CallDone{CallID: "llm_01", StartedAt: 1795536432506, Model: "openai/gpt-4o", UpstreamModel: "gpt-4o", Endpoint: EndpointChat,
		Stream: true, Status: 200, Outcome: OutcomeOK, Upstream: "openai", Attempts: 2, LatencyMS: 1.425, TTFTMS: 0.5, ProxyOverheadMS: 0.11,
		PromptTokens: 120, CompletionTokens: 30, CachedTokens: 20, ReasoningTokens: 7, TotalTokens: 150, EstimatedCost: 0.000034,
		Price: &Price{Input: 2.5, CachedInput: 1.25, Output: 10}, Partial: true, Chunks: 14,
		Error: &CallError{Code: "upstream_error", Message: "upstream said \"no\" <html> & \u2028 \x00 \xff bad utf-8 é"}}
	checkCallDoneJSON(t, full)
	checkCallDoneJSON(t, CallDone{})
	// A call that did not stream says chunks 0 (API.md lists chunks as always there).
	if got := (&CallDone{Outcome: OutcomeOK}).AppendJSON(nil); !bytes.Contains(got, []byte(`"chunks":0`)) {
		t.Fatalf("a non-streamed call's record %s has no chunks", got)
	}
	for _, f := range []float64{0, 1, -1, 1e-7, 1.5e-9, 3e-6, 1e20, 1e21, 1.2345e300, 0.1 + 0.2, 123456789.123, 5e-324} {
		d := full
		d.EstimatedCost, d.LatencyMS, d.Price = f, f, &Price{Input: f, CachedInput: -f, Output: f / 3}
		checkCallDoneJSON(t, d)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		d := full
		d.LatencyMS = r.Float64() * 1e4
		d.TTFTMS = r.ExpFloat64()
		d.EstimatedCost = r.Float64() * 1e-5
		d.PromptTokens = r.Int64N(1 << 40)
		d.Model = string(rune(r.IntN(0x3000)))
		checkCallDoneJSON(t, d)
	}
}

func FuzzCallDoneAppendJSON(f *testing.F) {
	f.Add("gpt-4o", "a \"message\"", 1.25, int64(3))
	f.Fuzz(func(t *testing.T, model, msg string, x float64, n int64) {
		d := CallDone{Model: model, UpstreamModel: model, LatencyMS: x, EstimatedCost: x, PromptTokens: n, Error: &CallError{Code: model, Message: msg}}
		if _, err := json.Marshal(d); err != nil {
			return // NaN/Inf: json refuses them; never recorded
		}
		checkCallDoneJSON(t, d)
	})
}

func BenchmarkCallDoneJSON(b *testing.B) {
	d := CallDone{CallID: "llm_01a20e4fad7a783e8b8258c8afa18982", StartedAt: 1795536432506, Model: "fake-gpt", Endpoint: EndpointChat,
		Status: 200, Outcome: OutcomeOK, Upstream: "default", Attempts: 1, LatencyMS: 1.425, TTFTMS: 1.123, ProxyOverheadMS: 0.11,
		PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150, EstimatedCost: 0.000034, Price: &Price{Input: 2.5, CachedInput: 1.25, Output: 10}}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(d)
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = d.AppendJSON(buf[:0])
		}
	})
}
