package llmproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/llmproxy"
)

// Test identities: agentKey belongs to agent "agent-1", which owns run
// "run-1"; "run-2" belongs to another agent.
const (
	agentKey    = "ak_test_agent_1"
	upstreamKey = "sk-upstream-secret"
)

func testAuth(r *http.Request) (llmproxy.Caller, error) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || key == "" {
		return llmproxy.Caller{}, &llmproxy.Error{Status: 401, Code: "unauthorized", Message: "missing agent key"}
	}
	if key != agentKey {
		return llmproxy.Caller{}, &llmproxy.Error{Status: 401, Code: "unauthorized", Message: "unknown agent key"}
	}
	c := llmproxy.Caller{AgentID: "agent-1", RunID: r.Header.Get("X-Run-Id"), SessionID: r.Header.Get("X-Session-Id")}
	if c.RunID != "" && c.RunID != "run-1" {
		return llmproxy.Caller{}, &llmproxy.Error{Status: 403, Code: "forbidden", Message: "run " + c.RunID + " is not this agent's"}
	}
	return c, nil
}

// recorded is one Recorder call.
type recorded struct {
	Caller  llmproxy.Caller
	Type    string
	Payload any
}

// memRecorder keeps events in memory, like the real recorder it never
// blocks the call.
type memRecorder struct {
	mu     sync.Mutex
	events []recorded
	done   chan llmproxy.CallDone
}

func newMemRecorder() *memRecorder { return &memRecorder{done: make(chan llmproxy.CallDone, 1024)} }

func (m *memRecorder) Record(c llmproxy.Caller, typ string, payload any) {
	m.mu.Lock()
	m.events = append(m.events, recorded{c, typ, payload})
	m.mu.Unlock()
	if d, ok := payload.(llmproxy.CallDone); ok {
		m.done <- d
	}
}

func (m *memRecorder) all() []recorded {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]recorded(nil), m.events...)
}

// waitDone returns the next llm_call_done. llm_call_done is recorded when
// the handler finishes, which can be just after the client has its answer.
func (m *memRecorder) waitDone(t *testing.T) llmproxy.CallDone {
	t.Helper()
	select {
	case d := <-m.done:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no llm_call_done recorded")
		return llmproxy.CallDone{}
	}
}

// upstreamT is a fake upstream on a real loopback server.
type upstreamT struct {
	fake *fakellm.Server
	srv  *httptest.Server
	gone chan fakellm.ClientGone
}

func newUpstream(t *testing.T, opts fakellm.Options) *upstreamT {
	t.Helper()
	u := &upstreamT{gone: make(chan fakellm.ClientGone, 16)}
	opts.Capture = true
	if opts.APIKey == "" {
		opts.APIKey = upstreamKey
	}
	opts.OnClientGone = func(g fakellm.ClientGone) { u.gone <- g }
	u.fake = fakellm.New(opts)
	u.srv = httptest.NewServer(u.fake)
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstreamT) url() string { return u.srv.URL + "/v1" }

// lastRequest is the last request the upstream got.
func (u *upstreamT) lastRequest(t *testing.T) fakellm.Request {
	t.Helper()
	rs := u.fake.Requests()
	if len(rs) == 0 {
		t.Fatal("upstream got no request")
	}
	return rs[len(rs)-1]
}

// env is a proxy in front of upstreams, on a real loopback server.
type env struct {
	proxy *llmproxy.Proxy
	srv   *httptest.Server
	rec   *memRecorder
}

func newEnv(t *testing.T, cfg llmproxy.Config) *env {
	t.Helper()
	return newEnvAuth(t, cfg, testAuth)
}

// newEnvAuth is newEnv with another authenticator.
func newEnvAuth(t *testing.T, cfg llmproxy.Config, auth llmproxy.Authenticator) *env {
	t.Helper()
	e := &env{rec: newMemRecorder()}
	p, err := llmproxy.New(cfg, auth, e.rec)
	if err != nil {
		t.Fatalf("llmproxy.New: %v", err)
	}
	e.proxy = p
	mux := http.NewServeMux()
	p.Routes(mux)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		e.srv.Close()
		p.Close()
	})
	return e
}

// singleUpstream is the Config of AGENTPLANE_LLM_BASE_URL pointing at u.
func singleUpstream(u *upstreamT) llmproxy.Config {
	cfg := llmproxy.ConfigFromEnv(u.url(), upstreamKey)
	cfg.Prices = map[string]llmproxy.Price{"fake-gpt": {Input: 2.5, CachedInput: 1.25, Output: 10}}
	return cfg
}

// wire is what the client sent and got over HTTP, captured below the SDK.
type wire struct {
	mu        sync.Mutex
	reqBody   []byte
	respBody  bytes.Buffer
	status    int
	respHead  http.Header
	bodyDoneC chan struct{}
}

// teeBody copies a response body as the SDK reads it.
type teeBody struct {
	r    io.ReadCloser
	w    *wire
	once sync.Once
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.w.mu.Lock()
	b.w.respBody.Write(p[:n])
	b.w.mu.Unlock()
	if err != nil {
		b.once.Do(func() { close(b.w.bodyDoneC) })
	}
	return n, err
}

func (b *teeBody) Close() error {
	b.once.Do(func() { close(b.w.bodyDoneC) })
	return b.r.Close()
}

func (w *wire) body() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]byte(nil), w.respBody.Bytes()...)
}

// client is an openai-go client pointed at the proxy, as an agent uses it,
// with a middleware that captures the raw bytes exchanged.
func (e *env) client(t *testing.T, w *wire, opts ...option.RequestOption) openai.Client {
	t.Helper()
	base := []option.RequestOption{
		option.WithBaseURL(e.srv.URL + "/v1/"),
		option.WithAPIKey(agentKey),
		option.WithHeader("X-Run-Id", "run-1"),
		option.WithHeader("X-Session-Id", "sess-1"),
		option.WithMaxRetries(0),
	}
	if w != nil {
		base = append(base, option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			if req.Body != nil {
				b, _ := io.ReadAll(req.Body)
				req.Body.Close()
				w.reqBody = b
				req.Body = io.NopCloser(bytes.NewReader(b))
			}
			resp, err := next(req)
			if err != nil {
				return resp, err
			}
			w.status, w.respHead = resp.StatusCode, resp.Header.Clone()
			w.bodyDoneC = make(chan struct{})
			resp.Body = &teeBody{r: resp.Body, w: w}
			return resp, nil
		}))
	}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw request to the proxy.
func (e *env) post(t *testing.T, path, key string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// errorCode is error.code of a proxy error body.
func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if b.Error.Message == "" {
		t.Errorf("error body %s has no message", body)
	}
	return b.Error.Code
}

// sseEvents splits an SSE byte stream into its events (each with its
// terminating blank line).
func sseEvents(b []byte) []string {
	var out []string
	for _, ev := range strings.SplitAfter(string(b), "\n\n") {
		if ev != "" {
			out = append(out, ev)
		}
	}
	return out
}

// usageOf reads the usage object the upstream reported in a body or stream.
func usageOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var found map[string]any
	for _, chunk := range strings.Split(string(b), "\n") {
		chunk = strings.TrimPrefix(chunk, "data: ")
		var v map[string]any
		if json.Unmarshal([]byte(chunk), &v) != nil {
			continue
		}
		if u, ok := v["usage"].(map[string]any); ok {
			found = u
		}
		if r, ok := v["response"].(map[string]any); ok {
			if u, ok := r["usage"].(map[string]any); ok {
				found = u
			}
		}
	}
	if found == nil {
		t.Fatalf("no usage in upstream answer %q", b)
	}
	return found
}

func num(m map[string]any, path ...string) int64 {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = mm[p]
	}
	f, _ := v.(float64)
	return int64(f)
}

func userMessage(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "fake-gpt",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

// optionRun attributes one request to another run.
func optionRun(runID string) option.RequestOption { return option.WithHeader("X-Run-Id", runID) }
