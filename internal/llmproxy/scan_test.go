package llmproxy

import (
	"encoding/json"
	"mime"
	"net/http"
	"testing"
	"time"
)

func TestInspectAndRewriteRequest(t *testing.T) {
	cases := []struct {
		name, in      string
		upstreamModel string
		inject        bool
		want          string
		clientUsage   bool
	}{
		{"unchanged", `{"model":"m","messages":[]}`, "m", false, `{"model":"m","messages":[]}`, false},
		{"model stripped", `{"messages":[{"content":"\"model\": \"x\""}], "model" : "openai/gpt"}`, "gpt", false,
			`{"messages":[{"content":"\"model\": \"x\""}], "model" : "gpt"}`, false},
		{"inject without stream_options", `{"model":"m","stream":true}`, "m", true,
			`{"stream_options":{"include_usage":true},"model":"m","stream":true}`, false},
		{"inject into empty stream_options", `{"model":"m","stream":true,"stream_options":{ }}`, "m", true,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true }}`, false},
		{"inject beside other options", `{"model":"m","stream":true,"stream_options":{"x":1}}`, "m", true,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true,"x":1}}`, false},
		{"include_usage false flipped", `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, "m", true,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, false},
		{"stream_options null", `{"model":"m","stream":true,"stream_options":null}`, "m", true,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, false},
		{"both edits", `{"stream":true,"model":"a/b","stream_options":{"include_usage":false}}`, "b", true,
			`{"stream":true,"model":"b","stream_options":{"include_usage":true}}`, false},
		{"client asked", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, "m", false,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ri, err := inspectRequest([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if ri.clientUsage != tc.clientUsage {
				t.Errorf("clientUsage = %v", ri.clientUsage)
			}
			got := string(rewriteRequest([]byte(tc.in), &ri, tc.upstreamModel, tc.inject))
			if got != tc.want {
				t.Errorf("rewrite =\n%s\nwant\n%s", got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("rewrite is not valid JSON: %s", got)
			}
		})
	}
}

func TestInspectRequestErrors(t *testing.T) {
	for _, in := range []string{``, `[]`, `{"model":`, `{"model":"m"`, `{"model":"m",}`, `{"model":1}`, `{"messages":[]}`, `{"model":""}`} {
		if _, err := inspectRequest([]byte(in)); err == nil {
			t.Errorf("inspectRequest(%q) accepted", in)
		}
	}
	ri, err := inspectRequest([]byte(`{"model":"a\u002fb","stream":false}`))
	if err != nil || ri.model != "a/b" || ri.stream {
		t.Errorf("escaped model: %+v %v", ri, err)
	}
}

func TestFindUsageObject(t *testing.T) {
	ev := []byte(`data: {"choices":[{"delta":{"content":"the \"usage\": {\"x\":1} key"}}],"usage":null}` + "\n\n")
	if u := findUsageObject(ev); u.ok() {
		t.Errorf("found usage in %s", ev)
	}
	ev = []byte(`data: {"choices":[],"usage" : {"prompt_tokens":3,"completion_tokens":5,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":1}}}` + "\n\n")
	u := findUsageObject(ev)
	if !u.ok() {
		t.Fatal("usage not found")
	}
	us, ok := parseUsage(ev[u.start:u.end])
	if !ok || us != (Usage{PromptTokens: 3, CompletionTokens: 5, CachedTokens: 1, TotalTokens: 8}) {
		t.Errorf("usage = %+v", us)
	}
	if !hasEmptyChoices(ev) {
		t.Error("usage chunk not recognised")
	}
	// Responses API: nested in response.completed, input/output spelling.
	ev = []byte(`event: response.completed` + "\n" + `data: {"type":"response.completed","response":{"tools":[{"parameters":{"properties":{"usage":{"type":"string"}}}}],"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":17},"user":null}}` + "\n\n")
	u = findUsageObject(ev)
	us, ok = parseUsage(ev[u.start:u.end])
	if !ok || us != (Usage{PromptTokens: 10, CompletionTokens: 7, CachedTokens: 4, ReasoningTokens: 2, TotalTokens: 17}) {
		t.Errorf("responses usage = %+v", us)
	}
}

// One pass finds the usage object and says whether the event has an
// "error" key with a value; text that only mentions them does not count.
func TestScanKeys(t *testing.T) {
	for _, tc := range []struct {
		ev       string
		usage    string
		hasError bool
	}{
		{`data: {"choices":[{"delta":{"content":"a: b"},"finish_reason":null}],"usage":null}`, "", false},
		{`data: {"choices":[{"delta":{"content":"the \"error\": {\"x\":1} and \"usage\": {}"}}]}`, "", false},
		{`data: {"choices":[{"delta":{},"finish_reason":"error"}],"object":"chat.completion.chunk"}`, "", false},
		// vLLM's error chunk; inspect then checks it is one (isErrorObject).
		{`data: {"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}`, "", true},
		{`data: {"choices":[{"delta":{"content":"\"object\":\"error\""}}]}`, "", false},
		{`data: {"error":{"message":"overloaded","type":"server_error"}}`, "", true},
		{`data: {"id":"x","error" : "overloaded","choices":[]}`, "", true},
		{`data: {"error":null,"usage" :{"total_tokens":3}}`, `{"total_tokens":3}`, false},
		{`data: {"choices":[],"usage":{"total_tokens":3,"x":{"error":{}}}}`, `{"total_tokens":3,"x":{"error":{}}}`, false},
	} {
		u, hasError := scanKeys([]byte(tc.ev))
		got := ""
		if u.ok() {
			got = tc.ev[u.start:u.end]
		}
		if got != tc.usage || hasError != tc.hasError {
			t.Errorf("scanKeys(%s) = %q, %v; want %q, %v", tc.ev, got, hasError, tc.usage, tc.hasError)
		}
	}
	for ev, want := range map[string]bool{
		`{"choices":[{"finish_reason":null}]}`:                             false,
		`{"choices":[{"finish_reason" : "stop"}]}`:                         true,
		`{"choices":[{"delta":{"content":"\"finish_reason\":\"stop\""}}]}`: false,
	} {
		if got := hasFinishReason([]byte(ev)); got != want {
			t.Errorf("hasFinishReason(%s) = %v", ev, got)
		}
	}
}

// Cutting a member leaves the same object without it, valid JSON.
func TestMemberCut(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"usage":{"x":1}}`:                  `{"a":1}`,
		`{"usage":{"x":1},"a":1}`:                  `{"a":1}`,
		`{ "usage" : {"x":1} , "a":1}`:             `{ "a":1}`,
		`{"a":1 , "usage":{"x":{"y":2}} ,"b":[1]}`: `{"a":1 ,"b":[1]}`,
		`{"usage":{}}`:                             `{}`,
		`{"usage":null,"a":1}`:                     "",
		`{"a":{"usage":{"x":1}}}`:                  "",
		`{"a":"\"usage\":{}"}`:                     "",
		`{"a":`:                                    "",
	} {
		cut := memberCut([]byte(in), "usage")
		got := ""
		if cut.ok() {
			got = in[:cut.start] + in[cut.end:]
		}
		if got != want || got != "" && !json.Valid([]byte(got)) {
			t.Errorf("memberCut(%s) leaves %q, want %q", in, got, want)
		}
	}
}

func TestEventEnd(t *testing.T) {
	for in, want := range map[string]int{
		"data: x\n\nrest":         9,
		"data: x\r\n\r\nrest":     11,
		"event: e\ndata: x\n\n":   18,
		": keep-alive\n\ndata: y": 14,
		"data: x\n":               -1,
		"data: x":                 -1,
	} {
		if got := eventEnd([]byte(in)); got != want {
			t.Errorf("eventEnd(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream":                   true,
		"text/event-stream; charset=utf-8":    true,
		"text/event-stream;charset=utf-8":     true,
		"Text/Event-Stream":                   true, // the parser's case folding
		"text/event-stream ; charset=utf-8":   true,
		"text/event-streamx":                  false,
		"text/event-streaming; charset=utf-8": false,
		"application/json":                    false,
		"application/json; charset=utf-8":     false,
		"text/plain":                          false,
		"":                                    false,
		"not a media type;;":                  false,
	} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if got := isEventStream(h); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestPriceCost(t *testing.T) {
	p := Price{Input: 2.5, CachedInput: 1.25, Output: 10}
	u := Usage{PromptTokens: 1000, CachedTokens: 400, CompletionTokens: 200}
	if got, want := p.Cost(u), (600*2.5+400*1.25+200*10)/1e6; got != want {
		t.Errorf("cost = %v, want %v", got, want)
	}
	// No cached price: cached tokens cost full input price.
	if got, want := (Price{Input: 1, Output: 2}).Cost(u), (1000*1.0+200*2)/1e6; got != want {
		t.Errorf("cost = %v, want %v", got, want)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	cases := []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"2"}}, 2 * time.Second, true},
		{http.Header{"Retry-After-Ms": {"150"}, "Retry-After": {"9"}}, 150 * time.Millisecond, true},
		{http.Header{}, 0, false},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
	}
	for _, tc := range cases {
		got, ok := retryAfter(tc.h)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%v) = %v %v", tc.h, got, ok)
		}
	}
	if d, ok := retryAfter(http.Header{"Retry-After": {time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}); !ok || d < 59*time.Minute {
		t.Errorf("date Retry-After = %v %v", d, ok)
	}
}

func TestLimiter(t *testing.T) {
	l := newLimiter(Limits{RequestsPerSecond: 2, Burst: 2, TokensPerMinute: 600})
	now := time.Unix(1000, 0)
	if l.admit("a", now) != nil || l.admit("a", now) != nil {
		t.Fatal("burst refused")
	}
	e := l.admit("a", now)
	if e == nil || e.Status != 429 || e.RetryAfterMS != 501 {
		t.Fatalf("third request: %+v", e)
	}
	if l.admit("b", now) != nil {
		t.Error("agents share a bucket")
	}
	if l.admit("a", now.Add(500*time.Millisecond)) != nil {
		t.Error("bucket did not refill")
	}
	l.charge("a", 700, now.Add(500*time.Millisecond)) // 100 over the minute's budget
	e = l.admit("a", now.Add(10*time.Second))
	if e == nil || e.Code != CodeRateLimited {
		t.Fatalf("token budget exhausted but admitted: %+v", e)
	}
	if l.admit("a", now.Add(20*time.Second)) != nil {
		t.Error("token budget did not refill")
	}
	l.sweep(now.Add(time.Hour))
	if len(l.agents) != 0 {
		t.Errorf("idle agents kept: %d", len(l.agents))
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Upstreams: []Upstream{{Name: "", BaseURL: "http://x/v1"}}},
		{Upstreams: []Upstream{{Name: "a", BaseURL: "ftp://x"}}},
		{Upstreams: []Upstream{{Name: "a", BaseURL: "http://x"}, {Name: "a", BaseURL: "http://y"}}},
		{Upstreams: []Upstream{{Name: "a", BaseURL: "http://x"}}, Fallback: []string{"b"}},
		{Prices: map[string]Price{"m": {Input: -1}}},
	}
	for i, c := range bad {
		if c.Validate() == nil {
			t.Errorf("config %d accepted", i)
		}
	}
	if err := ConfigFromEnv("http://127.0.0.1:1/v1", "k").Validate(); err != nil {
		t.Error(err)
	}
	if len(ConfigFromEnv(" ", "k").Upstreams) != 0 {
		t.Error("blank base URL configured an upstream")
	}
}

// The per-request and per-chunk work of the hot path.

var benchReq = []byte(`{"model":"openai/gpt-4o","stream":true,"messages":[{"role":"system","content":"` +
	`You are a helpful assistant for an operations team. Answer briefly and precisely, citing sources."},` +
	`{"role":"user","content":"What is the status of the nightly deployment pipeline today? Include \"quoted\" details."}],"temperature":0.2}`)

func BenchmarkInspectAndRewrite(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ri, err := inspectRequest(benchReq)
		if err != nil {
			b.Fatal(err)
		}
		_ = rewriteRequest(benchReq, &ri, "gpt-4o", true)
	}
}

func BenchmarkInspectChunk(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	c := &call{strip: true, ep: epChat}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		if eventEnd(chunk) < 0 || c.inspect(chunk).ok() {
			b.Fatal("bad chunk")
		}
	}
}

// BenchmarkInspectResponsesEvent is the per-event work of a Responses
// stream: its type, read from the "event:" line, decides everything.
func BenchmarkInspectResponsesEvent(b *testing.B) {
	ev := []byte("event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":" word","sequence_number":5}` + "\n\n")
	c := &call{ep: epResponses}
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		if eventEnd(ev) < 0 {
			b.Fatal("bad event")
		}
		c.inspect(ev)
	}
}

func BenchmarkParseUsage(b *testing.B) {
	u := []byte(`{"prompt_tokens":31,"completion_tokens":12,"total_tokens":43,"prompt_tokens_details":{"cached_tokens":15,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":3,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := parseUsage(u); !ok {
			b.Fatal("parse")
		}
	}
}

// BenchmarkIsEventStream is a micro-benchmark of the check every answer
// passes through, against the media-type parser it used to be (the baseline).
func BenchmarkIsEventStream(b *testing.B) {
	for _, ct := range []string{"text/event-stream; charset=utf-8", "application/json"} {
		h := http.Header{"Content-Type": {ct}}
		b.Run(ct+"/parser", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
				_ = err == nil && mt == "text/event-stream"
			}
		})
		b.Run(ct+"/isEventStream", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				isEventStream(h)
			}
		})
	}
}

// A Responses stream ends only at its terminal event: a "usage" key in an
// earlier one (a tool's parameter schema echoed in response.created) must
// not pass for the end, or a stream cut after it reads as complete and is
// recorded ok. Events with and without their "event:" line.
func TestResponsesStreamEndsAtItsTerminalEvent(t *testing.T) {
	created := `{"type":"response.created","response":{"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"usage":{"type":"object","properties":{}}}}}]}}`
	completed := `{"type":"response.completed","response":{"usage":{"input_tokens":10,"output_tokens":7,"total_tokens":17}}}`
	for _, named := range []bool{true, false} {
		ev := func(typ, data string) []byte {
			if named {
				return []byte("event: " + typ + "\ndata: " + data + "\n\n")
			}
			return []byte("data: " + data + "\n\n")
		}
		c := &call{ep: epResponses}
		c.inspect(ev("response.created", created))
		c.inspect(ev("response.in_progress", `{"type":"response.in_progress"}`))
		if c.sawEnd || c.haveUsage {
			t.Fatalf("named %v: end %v, usage %v after response.created with a \"usage\" parameter", named, c.sawEnd, c.haveUsage)
		}
		c.inspect(ev("response.completed", completed))
		if !c.sawEnd || !c.haveUsage || c.usage.TotalTokens != 17 {
			t.Fatalf("named %v: end %v, usage %+v after response.completed", named, c.sawEnd, c.usage)
		}
	}
}
