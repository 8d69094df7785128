package agentplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// short gives each tool request 200 ms (invoke) or 250 ms (:wait) to answer.
var short = agentplane.WithToolAttemptTime(100*time.Millisecond, 150*time.Millisecond, 100*time.Millisecond)

// silentServer is a real HTTP server that takes each request and, for
// those hang says, never answers (mid-body when headers is set): it holds
// the connection until the client gives up. Others get answer.
func silentServer(t *testing.T, hang func(n int, r *http.Request) (silent, headers bool), answer http.HandlerFunc) (*httptest.Server, func() []string) {
	t.Helper()
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			IdempotencyKey string `json:"idempotency_key"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		n++
		i := n
		seen = append(seen, r.URL.Path+" "+body.IdempotencyKey)
		mu.Unlock()
		if silent, headers := hang(i, r); silent {
			if headers {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				w.Write([]byte(`{"tool_call_id":`))
				w.(http.Flusher).Flush()
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		answer(w, r)
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestInvokeToolAbandonsUnansweredRequests: an invoke and a :wait that the
// other end accepts but never answers (nor finishes answering) are given up
// after their time and sent again — the invoke with the same idempotency
// key — so the call completes instead of hanging until ctx ends.
func TestInvokeToolAbandonsUnansweredRequests(t *testing.T) {
	srv, requests := silentServer(t, func(n int, r *http.Request) (bool, bool) {
		// 1: invoke, silent; 2: invoke, answered; 3: :wait, stalls mid-body; 4: :wait, answered.
		return n == 1 || n == 3, n == 3
	}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, ":invoke") {
			w.Write([]byte(`{"tool_call_id":"tc_1","status":"pending","state":"WAITING_APPROVAL"}`))
			return
		}
		w.Write([]byte(`{"tool_call_id":"tc_1","status":"succeeded","state":"SUCCEEDED","result":"ok"}`))
	})
	c := &agentplane.Client{BaseURL: srv.URL, APIKey: "ak_1", RunID: "run_1"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.InvokeTool(ctx, "demo.weather", map[string]any{}, fast, short)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `"ok"` {
		t.Fatalf("result %s, want \"ok\"", res)
	}
	seen := requests()
	if len(seen) != 4 {
		t.Fatalf("requests %q, want invoke, invoke, :wait, :wait", seen)
	}
	if a, b := seen[0], seen[1]; a != b || !strings.HasPrefix(a, "/v1/tools/demo.weather:invoke idk_") {
		t.Errorf("invokes %q and %q, want the same key on the re-sent one", a, b)
	}
}

// TestInvokeToolUnansweredIsBounded: a platform that never answers costs
// ToolMaxAttempts sends, then an error that is not the caller's deadline.
func TestInvokeToolUnansweredIsBounded(t *testing.T) {
	srv, requests := silentServer(t, func(int, *http.Request) (bool, bool) { return true, false }, nil)
	c := &agentplane.Client{BaseURL: srv.URL, APIKey: "ak_1", RunID: "run_1"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.InvokeTool(ctx, "demo.weather", map[string]any{}, fast, short)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("err = %v after %v, want a failure before the caller's deadline", err, time.Since(start))
	}
	var te *agentplane.ToolError
	if errors.As(err, &te) {
		t.Errorf("err = %v, want no ToolError: the call may still be running", err)
	}
	if seen := requests(); len(seen) != agentplane.ToolMaxAttempts {
		t.Errorf("%d sends, want %d", len(seen), agentplane.ToolMaxAttempts)
	}
}

// TestInvokeToolResentThroughAHangingProxy: against the real platform, a
// proxy that passes the first invoke on (the call is created and the tool
// runs) but never returns its answer. The SDK gives up on it and sends the
// invoke again; the platform answers with the same call, so the tool runs
// once and the run ends done with its result.
func TestInvokeToolResentThroughAHangingProxy(t *testing.T) {
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	var calls atomic.Int32
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"temp":21}`))
	}))
	t.Cleanup(tool.Close)
	def := `{"kind":"server","endpoint":"` + tool.URL + `","parameters":{"type":"object"},"policy":{"decision":"allow"}}`
	req, _ := http.NewRequest(http.MethodPut, p.URL+"/v1/tools/demo.weather", strings.NewReader(def))
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT tool: %d", resp.StatusCode)
	}

	target, _ := url.Parse(p.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var invokes atomic.Int32
	release := make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ":invoke") && invokes.Add(1) == 1 {
			rp.ServeHTTP(httptest.NewRecorder(), r) // the platform does the work; the answer is lost
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(release); proxy.Close() })

	var result string
	p.agent(t, "weather", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		res, err := req.Client().InvokeTool(ctx, "demo.weather", map[string]any{"city": "Rome"},
			agentplane.WithToolAttemptTime(time.Second, time.Second, time.Second))
		if err != nil {
			return err
		}
		result = string(res)
		return s.Delta(result)
	}, func(c *agentplane.Client) { c.BaseURL = proxy.URL })
	msgs := p.run(t, "weather", "go")
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("the run ended %v, want done", end)
	}
	if result != `{"temp":21}` {
		t.Errorf("result %q, want the tool's answer", result)
	}
	if n := invokes.Load(); n != 2 {
		t.Errorf("%d invokes through the proxy, want 2", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}
