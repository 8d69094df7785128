package agentplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// fast keeps the pauses and backoffs of InvokeTool in the millisecond range.
var fast = agentplane.WithToolTiming(time.Millisecond, 3*time.Millisecond, time.Millisecond)

// script answers with replies in order, then repeats the last one.
func script(replies ...reply) func(recorded) reply {
	var mu sync.Mutex
	n := 0
	return func(recorded) reply {
		mu.Lock()
		defer mu.Unlock()
		r := replies[min(n, len(replies)-1)]
		n++
		return r
	}
}

// view is a tool-call view as the platform sends it (contract §Invoke).
func view(status, state string, extra map[string]any) reply {
	v := map[string]any{"tool_call_id": "tc_1", "tool_name": "demo.weather", "run_id": "run_1", "status": status, "state": state, "created_at": 1, "updated_at": 2}
	for k, x := range extra {
		v[k] = x
	}
	return reply{Status: http.StatusOK, Body: v}
}

func errReply(status int, code string) reply {
	return reply{Status: status, Body: map[string]any{"error": map[string]any{"code": code, "message": code + " happened"}}}
}

const (
	invokePath = "POST /v1/tools/demo.weather:invoke"
	waitPath   = "POST /v1/tool_calls/tc_1:wait"
)

// requestsTo returns the requests fp received for "METHOD /path".
func (fp *fakePlatform) requestsTo(route string) []recorded {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	var out []recorded
	for _, r := range fp.requests {
		if r.Method+" "+r.Path == route {
			out = append(out, r)
		}
	}
	return out
}

func TestInvokeToolSucceededAtOnce(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		invokePath: script(view("succeeded", "SUCCEEDED", map[string]any{"result": map[string]any{"temp_c": 21}})),
	})
	res, err := boundClient(fp).Tools().Invoke(context.Background(), "demo.weather", map[string]any{"city": "Paris"}, agentplane.WithToolTimeout(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"temp_c":21}` {
		t.Errorf("result = %s", res)
	}
	if fp.count() != 1 {
		t.Errorf("%d requests, want 1 (no :wait for a call that is already over)", fp.count())
	}
	rec := fp.last(t)
	assertAttributed(t, rec)
	if rec.Body["run_id"] != "run_1" || rec.Body["timeout_ms"] != float64(1500) {
		t.Errorf("body = %v", rec.Body)
	}
	if args, _ := rec.Body["args"].(map[string]any); args["city"] != "Paris" {
		t.Errorf("args = %v", rec.Body["args"])
	}
	if key, _ := rec.Body["idempotency_key"].(string); len(key) < 16 {
		t.Errorf("idempotency_key = %q, want a random key", key)
	}
}

func TestInvokeToolNilArgsSendsAnObject(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"POST /v1/tools/client.now:invoke": script(view("succeeded", "SUCCEEDED", map[string]any{"result": "noon"})),
	})
	if _, err := boundClient(fp).InvokeTool(context.Background(), "client.now", nil); err != nil {
		t.Fatal(err)
	}
	rec := fp.last(t)
	if args, ok := rec.Body["args"].(map[string]any); !ok || len(args) != 0 {
		t.Errorf("args = %#v, want {}", rec.Body["args"])
	}
	if _, ok := rec.Body["timeout_ms"]; ok {
		t.Errorf("timeout_ms sent without WithToolTimeout: %v", rec.Body)
	}
}

func TestInvokeToolWaitsWhilePending(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		invokePath: script(view("pending", "WAITING_APPROVAL", map[string]any{"approval_id": "ap_1"})),
		waitPath: script(
			view("pending", "WAITING_APPROVAL", map[string]any{"approval_id": "ap_1"}), // a round that timed out
			view("pending", "RUNNING", nil),
			view("succeeded", "SUCCEEDED", map[string]any{"result": map[string]any{"ok": true}}),
		),
	})
	var pending []agentplane.ToolCall
	res, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{"city": "Oslo"}, fast,
		agentplane.WithOnPending(func(tc agentplane.ToolCall) { pending = append(pending, tc) }))
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"ok":true}` {
		t.Errorf("result = %s", res)
	}
	if len(pending) != 1 || pending[0].State != "WAITING_APPROVAL" || pending[0].ApprovalID != "ap_1" || pending[0].ToolCallID != "tc_1" {
		t.Errorf("OnPending got %+v, want one call with the invoke's view", pending)
	}
	waits := fp.requestsTo(waitPath)
	if len(waits) != 3 {
		t.Fatalf("%d :wait calls, want 3", len(waits))
	}
	for _, w := range waits {
		assertAttributed(t, w)
		if got := w.Query["timeout_ms"]; len(got) != 1 || got[0] != "30000" {
			t.Errorf(":wait timeout_ms = %v, want 30000", got)
		}
	}
}

func TestInvokeToolFailedIsToolError(t *testing.T) {
	tests := []struct {
		name        string
		invoke      reply
		wait        reply
		code, state string
	}{
		{
			name:   "rejected after an approval wait",
			invoke: view("pending", "WAITING_APPROVAL", map[string]any{"approval_id": "ap_1"}),
			wait:   view("failed", "REJECTED", map[string]any{"approval_id": "ap_1", "error": map[string]any{"code": "rejected", "message": "too much", "detail": map[string]any{"reason": "no"}}}),
			code:   "rejected", state: "REJECTED",
		},
		{
			name:   "failed at once",
			invoke: view("failed", "FAILED", map[string]any{"error": map[string]any{"code": "tool_http_error", "message": "tool answered 500"}}),
			code:   "tool_http_error", state: "FAILED",
		},
		{
			name:   "failed without an error object",
			invoke: view("failed", "BLOCKED", nil),
			code:   "blocked", state: "BLOCKED",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routes := map[string]func(recorded) reply{invokePath: script(tt.invoke)}
			if tt.wait.Status != 0 {
				routes[waitPath] = script(tt.wait)
			}
			fp := newFakePlatform(t, routes)
			_, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
			var te *agentplane.ToolError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v (%T), want a *ToolError", err, err)
			}
			if te.Code != tt.code || te.State != tt.state || te.ToolCallID != "tc_1" || te.ToolName != "demo.weather" {
				t.Errorf("ToolError = %+v", te)
			}
			var ae *agentplane.APIError
			if errors.As(err, &ae) {
				t.Errorf("a failed tool call is not an API error: %v", err)
			}
		})
	}
	t.Run("message and detail", func(t *testing.T) {
		fp := newFakePlatform(t, map[string]func(recorded) reply{invokePath: script(tests[0].invoke), waitPath: script(tests[0].wait)})
		_, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
		var te *agentplane.ToolError
		if !errors.As(err, &te) || te.Message != "too much" || string(te.Detail) != `{"reason":"no"}` || te.ApprovalID != "ap_1" {
			t.Fatalf("err = %+v", err)
		}
	})
}

func TestInvokeToolRetriesGatewayErrorsWithTheSameKey(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		invokePath: script(errReply(503, "unavailable"), errReply(502, "bad_gateway"), view("pending", "WAITING_CLIENT", nil)),
		waitPath:   script(errReply(504, "gateway_timeout"), view("succeeded", "SUCCEEDED", map[string]any{"result": 7})),
	})
	res, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{"city": "Rome"}, fast)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != "7" {
		t.Errorf("result = %s", res)
	}
	invokes := fp.requestsTo(invokePath)
	if len(invokes) != 3 {
		t.Fatalf("%d invokes, want 3 (two retried gateway errors)", len(invokes))
	}
	key := invokes[0].Body["idempotency_key"]
	for i, r := range invokes {
		if r.Body["idempotency_key"] != key {
			t.Errorf("invoke %d used key %v, want %v: a retry must reuse the key", i, r.Body["idempotency_key"], key)
		}
	}
	if n := len(fp.requestsTo(waitPath)); n != 2 {
		t.Errorf("%d :wait calls, want 2", n)
	}

	// Two separate invokes draw two keys; a caller's key is used as given.
	if _, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast); err != nil {
		t.Fatal(err)
	}
	if _, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast, agentplane.WithIdempotencyKey("mine")); err != nil {
		t.Fatal(err)
	}
	invokes = fp.requestsTo(invokePath)
	if k := invokes[3].Body["idempotency_key"]; k == key {
		t.Errorf("a new invoke reused the previous key %v", k)
	}
	if k := invokes[4].Body["idempotency_key"]; k != "mine" {
		t.Errorf("idempotency_key = %v, want the caller's", k)
	}
}

func TestInvokeToolRetriesAreBounded(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{invokePath: script(errReply(503, "unavailable"))})
	_, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
	var ae *agentplane.APIError
	if !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("err = %v, want the last 503", err)
	}
	if n := fp.count(); n != agentplane.ToolMaxAttempts {
		t.Errorf("%d attempts, want %d", n, agentplane.ToolMaxAttempts)
	}
}

// TestInvokeToolNoRetryOn4xx: a refusal comes back at once, as a
// *ToolError (issue 8 item 18: invalid_args and tool_not_found were bare
// *APIErrors, which code catching ToolError missed). A 429 is not a
// refusal: see TestInvokeToolRetriesRateLimited.
func TestInvokeToolNoRetryOn4xx(t *testing.T) {
	for _, tt := range []struct {
		status int
		code   string
	}{{400, "invalid_args"}, {403, "forbidden"}, {404, "tool_not_found"}, {409, "idempotency_conflict"}} {
		t.Run(tt.code, func(t *testing.T) {
			fp := newFakePlatform(t, map[string]func(recorded) reply{invokePath: script(errReply(tt.status, tt.code))})
			_, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
			// One hierarchy: a refused call is a *ToolError with the
			// platform's code, and still an *APIError underneath.
			var te *agentplane.ToolError
			if !errors.As(err, &te) || te.Code != tt.code || te.Status != tt.status || te.ToolName != "demo.weather" {
				t.Fatalf("err = %v (%T), want a ToolError %d %s", err, err, tt.status, tt.code)
			}
			var ae *agentplane.APIError
			if !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code {
				t.Fatalf("err = %v, want APIError %d %s", err, tt.status, tt.code)
			}
			if n := fp.count(); n != 1 {
				t.Errorf("%d requests, want 1: a 4xx is not retried", n)
			}
		})
	}
	t.Run("during the wait", func(t *testing.T) {
		fp := newFakePlatform(t, map[string]func(recorded) reply{
			invokePath: script(view("pending", "WAITING_CLIENT", nil)),
			waitPath:   script(errReply(404, "not_found")),
		})
		_, err := boundClient(fp).InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
		var te *agentplane.ToolError
		if !errors.As(err, &te) || te.Status != 404 || te.Code != "not_found" || te.ToolCallID != "tc_1" {
			t.Fatalf("err = %v", err)
		}
		if n := len(fp.requestsTo(waitPath)); n != 1 {
			t.Errorf("%d :wait calls, want 1", n)
		}
	})
}

// rateLimited is the platform's 429 (API.md, Rate limits): retry_after_ms
// in the body, whole seconds in retry_after and (fakePlatform) Retry-After.
func rateLimited(ms int64) reply {
	secs := max(1, (ms+999)/1000)
	return reply{Status: http.StatusTooManyRequests, Body: map[string]any{"error": map[string]any{
		"code": "rate_limited", "message": "agent key over its request rate; retry later", "retry_after": secs, "retry_after_ms": ms}}}
}

// TestInvokeToolRetriesRateLimited: a 429 (the key's token bucket is empty)
// is no answer about the call — the platform did no work and says when to
// come back. The invoke is sent again with its key and the :wait again,
// after the body's retry_after_ms (not the header's whole second), and more
// often than ToolMaxAttempts: the limit is not a failure.
func TestInvokeToolRetriesRateLimited(t *testing.T) {
	n := agentplane.ToolMaxAttempts + 1
	invokes := make([]reply, 0, n+1)
	for range n {
		invokes = append(invokes, rateLimited(40))
	}
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		invokePath: script(append(invokes, view("pending", "WAITING_APPROVAL", nil))...),
		waitPath:   script(rateLimited(40), view("succeeded", "SUCCEEDED", map[string]any{"result": 7})),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := boundClient(fp).InvokeTool(ctx, "demo.weather", map[string]any{}, fast)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != "7" {
		t.Errorf("result = %s", res)
	}
	recs := fp.requestsTo(invokePath)
	if len(recs) != n+1 {
		t.Fatalf("%d invokes, want %d", len(recs), n+1)
	}
	for i, r := range recs {
		if r.Body["idempotency_key"] != recs[0].Body["idempotency_key"] {
			t.Errorf("invoke %d used key %v, want %v: a retry must reuse the key", i, r.Body["idempotency_key"], recs[0].Body["idempotency_key"])
		}
	}
	if w := len(fp.requestsTo(waitPath)); w != 2 {
		t.Errorf("%d :wait calls, want 2", w)
	}
	if min := time.Duration(n+1) * 40 * time.Millisecond; took < min {
		t.Errorf("took %v, want at least %v: retried before the retry_after_ms the platform asked for", took, min)
	}
	if took > time.Second {
		t.Errorf("took %v: waited the header's whole second instead of retry_after_ms", took)
	}
}

// TestInvokeToolRateLimitedRetryAfterHeader: without retry_after_ms the
// Retry-After header (seconds) says how long; without either, the usual
// backoff.
func TestInvokeToolRateLimitedRetryAfterHeader(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":{"code":"rate_limited","message":"slow down"}}`))
		case 2:
			http.Error(w, "too many requests", http.StatusTooManyRequests)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"tool_call_id":"tc_1","status":"succeeded","state":"SUCCEEDED","result":"ok"}`))
		}
	}))
	t.Cleanup(srv.Close)
	c := &agentplane.Client{BaseURL: srv.URL, APIKey: "ak_1", RunID: "run_1"}
	start := time.Now()
	res, err := c.InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `"ok"` || n.Load() != 3 {
		t.Fatalf("result %s after %d requests, want \"ok\" after 3", res, n.Load())
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("took %v, want the Retry-After's second", d)
	}
}

// TestInvokeToolRateLimitedPastTheDeadline: a 429 asking for longer than
// ctx leaves ends the call at once with the rate limit — an *APIError with
// RetryAfter, not a *ToolError: the call is still pending.
func TestInvokeToolRateLimitedPastTheDeadline(t *testing.T) {
	for _, tt := range []struct {
		name   string
		routes map[string]func(recorded) reply
		callID string
	}{
		{"during the wait", map[string]func(recorded) reply{invokePath: script(view("pending", "WAITING_CLIENT", nil)), waitPath: script(rateLimited(5000))}, "tc_1"},
		{"at the invoke", map[string]func(recorded) reply{invokePath: script(rateLimited(5000))}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakePlatform(t, tt.routes)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := boundClient(fp).InvokeTool(ctx, "demo.weather", map[string]any{}, fast)
			if d := time.Since(start); d > 400*time.Millisecond {
				t.Errorf("returned after %v: a wait past the deadline is not worth starting", d)
			}
			var te *agentplane.ToolError
			if errors.As(err, &te) {
				t.Fatalf("err = %v: a rate limit is not a failed call", err)
			}
			var ae *agentplane.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.Code != "rate_limited" || ae.RetryAfter != 5*time.Second {
				t.Fatalf("err = %v, want the 429 rate_limited with RetryAfter 5s", err)
			}
			if tt.callID != "" && (!strings.Contains(err.Error(), tt.callID) || !strings.Contains(err.Error(), "pending")) {
				t.Errorf("err = %v, want it to name the pending call %s", err, tt.callID)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v: the rate limit, not the deadline, ended the call", err)
			}
		})
	}
}

// TestInvokeToolRetriesConnectionErrors drops the first connection without
// an answer, as a crashing server or a restarting proxy would.
func TestInvokeToolRetriesConnectionErrors(t *testing.T) {
	var n atomic.Int32
	keys := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			IdempotencyKey string `json:"idempotency_key"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		keys <- body.IdempotencyKey
		if n.Add(1) == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"tool_call_id":"tc_1","status":"succeeded","state":"SUCCEEDED","result":"ok"}`))
	}))
	t.Cleanup(srv.Close)
	c := &agentplane.Client{BaseURL: srv.URL, APIKey: "ak_1", RunID: "run_1"}
	res, err := c.InvokeTool(context.Background(), "demo.weather", map[string]any{}, fast)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `"ok"` || n.Load() != 2 {
		t.Fatalf("result %s after %d requests, want \"ok\" after 2", res, n.Load())
	}
	if k1, k2 := <-keys, <-keys; k1 == "" || k1 != k2 {
		t.Errorf("keys %q then %q, want the same key on the retry", k1, k2)
	}
}

func TestInvokeToolStopsAtTheDeadline(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		invokePath: script(view("pending", "WAITING_APPROVAL", nil)),
		waitPath:   script(view("pending", "WAITING_APPROVAL", nil)),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := boundClient(fp).InvokeTool(ctx, "demo.weather", map[string]any{}, agentplane.WithToolTiming(10*time.Millisecond, 20*time.Millisecond, time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v", d)
	}
	// Each round asks for no more than what is left of the deadline.
	for _, w := range fp.requestsTo(waitPath) {
		ms, err := strconv.Atoi(w.Query["timeout_ms"][0])
		if err != nil || ms < 1 || ms > 150 {
			t.Errorf(":wait timeout_ms = %v, want 1..150", w.Query["timeout_ms"])
		}
	}
}

func TestInvokeToolNeedsARun(t *testing.T) {
	fp := newFakePlatform(t, nil)
	c := boundClient(fp)
	c.RunID = ""
	if _, err := c.InvokeTool(context.Background(), "demo.weather", nil); err == nil {
		t.Fatal("InvokeTool without a run id returned nil")
	}
	if fp.count() != 0 {
		t.Error("a request was sent")
	}
}

func TestJitterBounds(t *testing.T) {
	lo, hi := agentplane.ToolWaitPauseMin, agentplane.ToolWaitPauseMax
	seen := map[time.Duration]bool{}
	var below, above bool
	mid := (lo + hi) / 2
	for range 10000 {
		d := agentplane.Jitter(lo, hi)
		if d < lo || d > hi {
			t.Fatalf("jitter %v outside [%v, %v]", d, lo, hi)
		}
		seen[d] = true
		below = below || d < mid
		above = above || d > mid
	}
	if len(seen) < 100 || !below || !above {
		t.Errorf("%d distinct values (below mid %v, above %v): not spread over the range", len(seen), below, above)
	}
	if d := agentplane.Jitter(lo, lo); d != lo {
		t.Errorf("Jitter(lo, lo) = %v", d)
	}
}

func TestListTools(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"GET /v1/tools": okJSON(map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "demo__weather", "description": "Weather", "parameters": map[string]any{"type": "object"},
		}}}}),
	})
	tools, err := boundClient(fp).Tools().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 1 || tools[0].Type != "function" || tools[0].Function.Name != "demo__weather" || string(tools[0].Function.Parameters) != `{"type":"object"}` {
		t.Fatalf("tools = %+v", tools)
	}
	if got := agentplane.ToolNameFromFunction(tools[0].Function.Name); got != "demo.weather" {
		t.Errorf("ToolNameFromFunction = %q", got)
	}
	for fn, name := range map[string]string{"demo_mcp--lookup_order": "demo_mcp@lookup_order", "files--read__text": "files@read.text", "s---x": "s@-x", "plain": "plain"} {
		if got := agentplane.ToolNameFromFunction(fn); got != name {
			t.Errorf("ToolNameFromFunction(%q) = %q, want %q", fn, got, name)
		}
	}
	rec := fp.last(t)
	assertAttributed(t, rec)
	if got := rec.Query["run_id"]; len(got) != 1 || got[0] != "run_1" {
		t.Errorf("query = %v", rec.Query)
	}
	// The schemas go back to an LLM unchanged.
	out, _ := json.Marshal(tools[0])
	if string(out) != `{"type":"function","function":{"name":"demo__weather","description":"Weather","parameters":{"type":"object"}}}` {
		t.Errorf("re-encoded = %s", out)
	}
}

func TestToolCallGet(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"GET /v1/tool_calls/tc_1": script(view("pending", "WAITING_CLIENT", nil)),
	})
	tc, err := boundClient(fp).Tools().Get(context.Background(), "tc_1")
	if err != nil {
		t.Fatal(err)
	}
	if tc.Status != "pending" || tc.State != "WAITING_CLIENT" || tc.ToolName != "demo.weather" {
		t.Errorf("ToolCall = %+v", tc)
	}
}

// An agent run without AGENTPLANE_URL gets a nil Request.Client; its calls
// say what to set instead of panicking.
func TestNilClientIsNotConfigured(t *testing.T) {
	var c *agentplane.Client
	if _, err := c.Tools().Invoke(context.Background(), "demo.weather", nil); !errors.Is(err, agentplane.ErrNotConfigured) {
		t.Fatalf("invoke: %v", err)
	}
	if _, err := c.Tools().List(context.Background()); !errors.Is(err, agentplane.ErrNotConfigured) {
		t.Fatalf("list: %v", err)
	}
	if _, err := c.Transcript(context.Background(), ""); !errors.Is(err, agentplane.ErrNotConfigured) {
		t.Fatalf("transcript: %v", err)
	}
	if err := c.Heartbeat(context.Background(), ""); !errors.Is(err, agentplane.ErrNotConfigured) ||
		!strings.Contains(err.Error(), "AGENTPLANE_URL") || !strings.Contains(err.Error(), "AGENTPLANE_AGENT_KEY") {
		t.Fatalf("heartbeat: %v", err)
	}
}
