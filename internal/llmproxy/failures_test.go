package llmproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/llmproxy"
)

func chatBody(model, text string, stream bool) []byte {
	s := "false"
	if stream {
		s = "true"
	}
	return []byte(`{"model":"` + model + `","stream":` + s + `,"messages":[{"role":"user","content":"` + text + `"}]}`)
}

func TestPrefixRoutingStripsPrefix(t *testing.T) {
	a := newUpstream(t, fakellm.Options{})
	b := newUpstream(t, fakellm.Options{})
	e := newEnv(t, llmproxy.Config{
		Upstreams: []llmproxy.Upstream{
			{Name: "openai", BaseURL: a.url(), APIKey: upstreamKey, Prefixes: []string{"openai/"}, StripPrefix: true},
			{Name: "local", BaseURL: b.url(), APIKey: upstreamKey, Prefixes: []string{"local/"}},
		},
		Prices: map[string]llmproxy.Price{"openai/gpt-x": {Input: 1, Output: 2}},
	})
	var w wire
	client := e.client(t, &w)
	params := userMessage("route me")
	params.Model = "openai/gpt-x"
	if _, err := client.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	got := a.lastRequest(t)
	// Only the model differs from what the client sent.
	want := bytes.Replace(w.reqBody, []byte(`"openai/gpt-x"`), []byte(`"gpt-x"`), 1)
	if !bytes.Equal(got.Body, want) {
		t.Errorf("upstream body\n%s\nwant\n%s", got.Body, want)
	}
	d := e.rec.waitDone(t)
	if d.Upstream != "openai" || d.Model != "openai/gpt-x" || d.UpstreamModel != "gpt-x" || d.Price == nil || d.Price.Input != 1 {
		t.Errorf("done = %+v", d)
	}

	// "local/" is not stripped; no catch-all upstream, so other models are unknown.
	params.Model = "local/llama"
	if _, err := client.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	if got := b.lastRequest(t); !bytes.Contains(got.Body, []byte(`"local/llama"`)) {
		t.Errorf("local upstream got %s", got.Body)
	}
	e.rec.waitDone(t)
	resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("mystery", "hi", false), nil)
	if resp.StatusCode != 404 || errorCode(t, body) != "model_not_found" {
		t.Errorf("unknown model: %d %s", resp.StatusCode, body)
	}
}

func TestFallbackOrder(t *testing.T) {
	first := newUpstream(t, fakellm.Options{})
	dead := newUpstream(t, fakellm.Options{})
	dead.srv.Close() // connection refused
	third := newUpstream(t, fakellm.Options{})
	cfg := llmproxy.Config{
		Upstreams: []llmproxy.Upstream{
			{Name: "first", BaseURL: first.url(), APIKey: upstreamKey},
			{Name: "dead", BaseURL: dead.url(), APIKey: upstreamKey},
			{Name: "third", BaseURL: third.url(), APIKey: upstreamKey},
		},
		Fallback: []string{"dead", "third"},
	}
	e := newEnv(t, cfg)
	client := e.client(t, nil)

	first.fake.Push(fakellm.Fault{Status: 503})
	resp, err := client.Chat.Completions.New(context.Background(), userMessage("fall back"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Message.Content != fakellm.Reply("fall back") {
		t.Fatalf("response = %s", resp.RawJSON())
	}
	d := e.rec.waitDone(t)
	if d.Attempts != 3 || d.Upstream != "third" || d.Outcome != "ok" || d.TotalTokens == 0 {
		t.Errorf("done = %+v", d)
	}
	if first.fake.RequestCount() != 1 || third.fake.RequestCount() != 1 {
		t.Errorf("requests: first %d third %d", first.fake.RequestCount(), third.fake.RequestCount())
	}

	// Every upstream failing: the last upstream answer is passed through.
	first.fake.Push(fakellm.Fault{Status: 500, Body: `{"error":{"message":"first down","type":"server_error","code":null}}`})
	third.fake.Push(fakellm.Fault{Status: 502, Body: `{"error":{"message":"third down","type":"server_error","code":"bad_gateway"}}`})
	hresp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "x", false), nil)
	if hresp.StatusCode != 502 || !strings.Contains(string(body), "third down") {
		t.Errorf("all failing: %d %s", hresp.StatusCode, body)
	}
	d = e.rec.waitDone(t)
	if d.Outcome != "error" || d.Status != 502 || d.Attempts != 3 || d.Partial || d.Error == nil || d.Error.Code != "bad_gateway" {
		t.Errorf("done = %+v (error %+v)", d, d.Error)
	}
}

func TestRetryAfter(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	cfg := singleUpstream(up)
	cfg.RetryAfterCap = 2 * time.Second
	e := newEnv(t, cfg)
	client := e.client(t, nil)

	t.Run("honoured within the cap", func(t *testing.T) {
		up.fake.Push(fakellm.Fault{Status: 429, Header: http.Header{"Retry-After": {"1"}}})
		start := time.Now()
		if _, err := client.Chat.Completions.New(context.Background(), userMessage("patience")); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < time.Second {
			t.Errorf("retried after %v, before Retry-After", el)
		}
		if d := e.rec.waitDone(t); d.Attempts != 2 || d.Outcome != "ok" {
			t.Errorf("done = %+v", d)
		}
	})

	t.Run("passed through beyond the cap", func(t *testing.T) {
		before := up.fake.RequestCount()
		body := `{"error":{"message":"slow down","type":"rate_limit_exceeded","code":"rate_limit_exceeded"}}`
		up.fake.Push(fakellm.Fault{Status: 429, Body: body, Header: http.Header{"Retry-After": {"30"}}})
		resp, got := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "now", false), nil)
		if resp.StatusCode != 429 || string(got) != body || resp.Header.Get("Retry-After") != "30" {
			t.Errorf("got %d %q Retry-After %q", resp.StatusCode, got, resp.Header.Get("Retry-After"))
		}
		if n := up.fake.RequestCount() - before; n != 1 {
			t.Errorf("upstream asked %d times", n)
		}
		if d := e.rec.waitDone(t); d.Attempts != 1 || d.Outcome != "error" || d.Status != 429 {
			t.Errorf("done = %+v", d)
		}
	})
}

func TestNoFallbackAfterFirstByte(t *testing.T) {
	a := newUpstream(t, fakellm.Options{})
	b := newUpstream(t, fakellm.Options{})
	e := newEnv(t, llmproxy.Config{
		Upstreams: []llmproxy.Upstream{
			{Name: "a", BaseURL: a.url(), APIKey: upstreamKey},
			{Name: "b", BaseURL: b.url(), APIKey: upstreamKey},
		},
		Fallback: []string{"b"},
	})
	a.fake.Push(fakellm.Fault{DisconnectAfter: 2})
	client := e.client(t, nil)
	stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("one two three four five"))
	n := 0
	for stream.Next() {
		n++
	}
	if stream.Err() == nil {
		t.Error("a stream broken upstream ended without error at the client")
	}
	if n != 2 {
		t.Errorf("client got %d chunks, want the 2 sent before the break", n)
	}
	if b.fake.RequestCount() != 0 {
		t.Error("fell back after the first byte")
	}
	d := e.rec.waitDone(t)
	if d.Outcome != "error" || !d.Partial || d.Attempts != 1 || d.Chunks != 2 {
		t.Errorf("done = %+v", d)
	}
}

func TestUpstreamErrorPassthrough(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	body := `{"error":{"message":"Invalid 'messages[0].role': bogus.","type":"invalid_request_error","param":"messages[0].role","code":"invalid_value"}}`
	up.fake.Push(fakellm.Fault{Status: 400, Body: body, Header: http.Header{"X-Upstream-Detail": {"kept"}}})
	resp, got := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "x", false), nil)
	if resp.StatusCode != 400 || string(got) != body || resp.Header.Get("X-Upstream-Detail") != "kept" {
		t.Errorf("got %d %q", resp.StatusCode, got)
	}
	d := e.rec.waitDone(t)
	if d.Outcome != "error" || d.Status != 400 || d.Partial || d.Attempts != 1 || d.Error.Code != "invalid_value" {
		t.Errorf("done = %+v", d)
	}

	// And through the SDK, the status and message arrive intact.
	up.fake.Push(fakellm.Fault{Status: 400, Body: body})
	client := e.client(t, nil)
	_, err := client.Chat.Completions.New(context.Background(), userMessage("x"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "invalid_value" {
		t.Errorf("SDK error = %v", err)
	}
	e.rec.waitDone(t)
}

func TestAuthErrors(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	cases := []struct {
		name, key string
		hdr       map[string]string
		status    int
		code      string
	}{
		{"no key", "", nil, 401, "unauthorized"},
		{"unknown key", "nope", nil, 401, "unauthorized"},
		{"another agent's run", agentKey, map[string]string{"X-Run-Id": "run-2"}, 403, "forbidden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings"} {
				resp, body := e.post(t, path, tc.key, chatBody("fake-gpt", "x", false), tc.hdr)
				if resp.StatusCode != tc.status || errorCode(t, body) != tc.code {
					t.Errorf("%s: %d %s", path, resp.StatusCode, body)
				}
			}
		})
	}
	// The SDK sees a typed error.
	client := e.client(t, nil)
	_, err := client.Chat.Completions.New(context.Background(), userMessage("x"), optionRun("run-2"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 {
		t.Errorf("SDK error = %v", err)
	}
	if up.fake.RequestCount() != 0 || len(e.rec.all()) != 0 {
		t.Errorf("refused calls reached upstream (%d) or were recorded (%d)", up.fake.RequestCount(), len(e.rec.all()))
	}
}

func TestRequestTooLarge(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	cfg := singleUpstream(up)
	cfg.Limits.MaxRequestBytes = 1024
	e := newEnv(t, cfg)
	big := chatBody("fake-gpt", strings.Repeat("word ", 400), false)
	resp, body := e.post(t, "/v1/chat/completions", agentKey, big, nil)
	if resp.StatusCode != 413 || errorCode(t, body) != "request_too_large" || !strings.Contains(string(body), "request body exceeds 1 KiB") {
		t.Errorf("got %d %s, want 413 naming the limit as every route does", resp.StatusCode, body)
	}
	// Without Content-Length (chunked) the limit holds too.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions", struct{ *bytes.Reader }{bytes.NewReader(big)})
	req.Header.Set("Authorization", "Bearer "+agentKey)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 413 {
		t.Errorf("chunked: %d", r2.StatusCode)
	}
	if up.fake.RequestCount() != 0 {
		t.Error("oversized request reached upstream")
	}
	// Malformed JSON is a clear 400, not a passthrough.
	resp, body = e.post(t, "/v1/chat/completions", agentKey, []byte(`{"model":`), nil)
	if resp.StatusCode != 400 || errorCode(t, body) != "invalid_json" {
		t.Errorf("malformed: %d %s", resp.StatusCode, body)
	}
}

func TestRateLimits(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})

	t.Run("requests per second", func(t *testing.T) {
		cfg := singleUpstream(up)
		cfg.Limits.RequestsPerSecond = 0.5
		cfg.Limits.Burst = 1
		e := newEnv(t, cfg)
		if resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "x", false), nil); resp.StatusCode != 200 {
			t.Fatalf("first: %d %s", resp.StatusCode, body)
		}
		resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "x", false), nil)
		if resp.StatusCode != 429 || errorCode(t, body) != "rate_limited" {
			t.Fatalf("second: %d %s", resp.StatusCode, body)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "2" {
			t.Errorf("Retry-After = %q, want 2", ra)
		}
		// The body says it too, as every other surface's 429 does.
		var b struct {
			Error struct {
				RetryAfter   int64 `json:"retry_after"`
				RetryAfterMS int64 `json:"retry_after_ms"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &b); err != nil || b.Error.RetryAfter != 2 || b.Error.RetryAfterMS <= 1000 || b.Error.RetryAfterMS > 2001 ||
			resp.Header.Get("Retry-After-Ms") != strconv.FormatInt(b.Error.RetryAfterMS, 10) {
			t.Errorf("429 body %s (Retry-After-Ms %q), want retry_after 2 and retry_after_ms as the header", body, resp.Header.Get("Retry-After-Ms"))
		}
		// The SDK reads it as a rate-limit error.
		client := e.client(t, nil)
		_, err := client.Chat.Completions.New(context.Background(), userMessage("x"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
			t.Errorf("SDK error = %v", err)
		}
	})

	t.Run("tokens per minute", func(t *testing.T) {
		cfg := singleUpstream(up)
		cfg.Limits.TokensPerMinute = 10
		e := newEnv(t, cfg)
		// One call of more than 10 tokens spends the minute's budget...
		if resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "a b c d e f g h i j k l", false), nil); resp.StatusCode != 200 {
			t.Fatalf("first: %d %s", resp.StatusCode, body)
		}
		if d := e.rec.waitDone(t); d.TotalTokens <= 10 {
			t.Fatalf("first call used only %d tokens", d.TotalTokens)
		}
		resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "x", false), nil)
		if resp.StatusCode != 429 || errorCode(t, body) != "rate_limited" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("second: %d %s", resp.StatusCode, body)
		}
	})
}

func TestNotConfigured(t *testing.T) {
	e := newEnv(t, llmproxy.ConfigFromEnv("", ""))
	for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings"} {
		resp, body := e.post(t, path, agentKey, chatBody("fake-gpt", "x", false), nil)
		if resp.StatusCode != 503 || errorCode(t, body) != "llm_not_configured" {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	client := e.client(t, nil)
	_, err := client.Models.List(context.Background())
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Errorf("models: %v", err)
	}
	// Not configured is no excuse to skip authentication.
	if resp, _ := e.post(t, "/v1/chat/completions", "", chatBody("fake-gpt", "x", false), nil); resp.StatusCode != 401 {
		t.Errorf("unauthenticated: %d", resp.StatusCode)
	}
}

// The client cancelling must reach the upstream at once: the proxy's
// upstream request carries the client's context.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	up.fake.Push(fakellm.Fault{StallAfter: 2})
	client := e.client(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(ctx, userMessage("never finishes"))
	for i := 0; i < 2; i++ {
		if !stream.Next() {
			t.Fatalf("stream ended early: %v", stream.Err())
		}
	}
	cancelled := time.Now()
	cancel()
	select {
	case g := <-up.gone:
		lag := g.At.Sub(cancelled)
		t.Logf("upstream saw the disconnect %v after the client cancelled", lag)
		if lag > 100*time.Millisecond {
			t.Errorf("upstream saw the disconnect after %v, want ≤ 100ms", lag)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("upstream never saw the client go away")
	}
	stream.Close()
	d := e.rec.waitDone(t)
	if d.Outcome != "cancelled" || !d.Partial || d.Chunks != 2 {
		t.Errorf("done = %+v", d)
	}
}

// A stream's headers reach the client before a slow first event does: a
// reasoning model can think for minutes before its first token, and a
// client's header timeout must not fire meanwhile. (Holding them for the
// first event to share a write was measured and saved nothing: BENCHMARKS.md.)
func TestStreamHeadersDoNotWaitForASlowFirstEvent(t *testing.T) {
	// openStream returns once the client has the response's headers; it
	// fails the test if they do not come within 10 s.
	openStream := func(t *testing.T, e *env) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions",
			bytes.NewReader(chatBody("fake-gpt", "think first", true)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+agentKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("no headers while the first event was held back: %v", err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return resp
	}

	t.Run("no event yet", func(t *testing.T) {
		up := newUpstream(t, fakellm.Options{})
		e := newEnv(t, singleUpstream(up))
		up.fake.Push(fakellm.Fault{BodyDelay: time.Minute})
		openStream(t, e).Body.Close()
		if d := e.rec.waitDone(t); d.Outcome != "cancelled" || d.Status != http.StatusOK {
			t.Errorf("done = %+v", d)
		}
		<-up.gone
	})

	t.Run("the first read ends inside an event", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk",`))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer up.Close()
		e := newEnv(t, llmproxy.ConfigFromEnv(up.URL+"/v1", upstreamKey))
		openStream(t, e).Body.Close()
		if d := e.rec.waitDone(t); d.Outcome != "cancelled" {
			t.Errorf("done = %+v", d)
		}
	})
}

func TestTimeouts(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	cfg := singleUpstream(up)
	cfg.Timeouts.FirstByte = 300 * time.Millisecond
	cfg.Timeouts.Idle = 300 * time.Millisecond
	e := newEnv(t, cfg)
	client := e.client(t, nil)

	t.Run("first byte, non-streaming", func(t *testing.T) {
		up.fake.Push(fakellm.Fault{FirstByteDelay: 10 * time.Second})
		resp, body := e.post(t, "/v1/chat/completions", agentKey, chatBody("fake-gpt", "slow", false), nil)
		if resp.StatusCode != 504 || errorCode(t, body) != "upstream_timeout" {
			t.Errorf("got %d %s", resp.StatusCode, body)
		}
		d := e.rec.waitDone(t)
		if d.Outcome != "timeout" || !d.Partial || d.Status != 504 || d.Error == nil {
			t.Errorf("done = %+v", d)
		}
		<-up.gone // the upstream request was cancelled, not left running
	})

	t.Run("first byte, stream opened but silent", func(t *testing.T) {
		up.fake.Push(fakellm.Fault{BodyDelay: 10 * time.Second})
		stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("silent"))
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Error("timed-out stream ended cleanly at the client")
		}
		d := e.rec.waitDone(t)
		if d.Outcome != "timeout" || !d.Partial || d.Error.Code != "upstream_timeout" {
			t.Errorf("done = %+v", d)
		}
		<-up.gone
	})

	t.Run("idle between chunks", func(t *testing.T) {
		up.fake.Push(fakellm.Fault{StallAfter: 3})
		stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("stalls mid way"))
		n := 0
		for stream.Next() {
			n++
		}
		if stream.Err() == nil || n != 3 {
			t.Errorf("client got %d chunks, err %v; want 3 and an error", n, stream.Err())
		}
		d := e.rec.waitDone(t)
		if d.Outcome != "timeout" || !d.Partial || d.Chunks != 3 || d.Status != 200 || !strings.Contains(d.Error.Message, "idle") {
			t.Errorf("done = %+v (%+v)", d, d.Error)
		}
		<-up.gone
	})
}

func TestModelsMergedAcrossUpstreams(t *testing.T) {
	a := newUpstream(t, fakellm.Options{Models: []string{"gpt-x"}})
	b := newUpstream(t, fakellm.Options{Models: []string{"llama"}})
	e := newEnv(t, llmproxy.Config{Upstreams: []llmproxy.Upstream{
		{Name: "openai", BaseURL: a.url(), APIKey: upstreamKey, Prefixes: []string{"openai/"}, StripPrefix: true},
		{Name: "local", BaseURL: b.url(), APIKey: upstreamKey},
	}})
	client := e.client(t, nil)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "openai/gpt-x,llama" {
		t.Errorf("models = %v", ids)
	}
}

// A client may hang up as soon as it has the last event (SDKs close on
// [DONE]); the call is complete then, whatever the upstream does next.
func TestStreamCompleteAtLastEvent(t *testing.T) {
	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	client := e.client(t, nil)

	for _, hold := range []string{"chat", "responses"} {
		t.Run(hold, func(t *testing.T) {
			up.fake.Push(fakellm.Fault{HoldOpen: true}) // the upstream never ends its response
			if hold == "chat" {
				stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("all of it"))
				for stream.Next() {
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				stream.Close()
			} else {
				stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
					Model: "fake-gpt", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("all of it")}})
				for stream.Next() {
					if stream.Current().Type == "response.completed" {
						break
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				stream.Close()
			}
			d := e.rec.waitDone(t)
			if d.Outcome != "ok" || d.Partial || d.TotalTokens == 0 || d.Error != nil {
				t.Errorf("done = %+v", d)
			}
		})
	}
}

func TestTotalTimeout(t *testing.T) {
	up := newUpstream(t, fakellm.Options{ChunkDelay: 100 * time.Millisecond})
	cfg := singleUpstream(up)
	cfg.Timeouts.Total = 350 * time.Millisecond // the stream takes ~1.5 s, each chunk well within the idle timeout
	e := newEnv(t, cfg)
	client := e.client(t, nil)
	stream := client.Chat.Completions.NewStreaming(context.Background(), userMessage("a long answer of many words that takes a while"))
	n := 0
	for stream.Next() {
		n++
	}
	if stream.Err() == nil {
		t.Error("stream cut by the total timeout ended cleanly")
	}
	d := e.rec.waitDone(t)
	if d.Outcome != "timeout" || !d.Partial || d.Error == nil || !strings.Contains(d.Error.Message, "total") || d.Chunks < n {
		t.Errorf("done = %+v (%+v), client got %d chunks", d, d.Error, n)
	}
	<-up.gone
}
