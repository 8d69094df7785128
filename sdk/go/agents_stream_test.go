package agentplane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// TestInvokeAgentStreamFailedIsBounded: when the platform cannot follow the
// child's log it ends the stream with `error {code: stream_failed}` and no
// seq (internal/httpapi/invoke.go), asking the caller to attach again. A
// platform that keeps doing so (its database down, the process shutting
// down) must be retried like any broken stream — with backoff, at most
// AgentMaxAttempts times — not re-invoked in a tight loop until ctx ends.
// The server stands in for the platform because its log cannot be made to
// fail on cue; it answers exactly what the platform's streamChild writes.
func TestInvokeAgentStreamFailedIsBounded(t *testing.T) {
	var invokes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/agents/worker:invoke" {
			http.NotFound(w, r)
			return
		}
		invokes.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("x-child-run-id", "run_child")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "event: run_started\ndata: {\"type\":\"run_started\",\"session_id\":\"ses_1\",\"seq\":1,\"run_id\":\"run_child\",\"parent_run_id\":\"run_1\"}\n\n")
		fmt.Fprint(w, "event: error\ndata: {\"type\":\"error\",\"run_id\":\"run_child\",\"code\":\"stream_failed\",\"message\":\"the child's event stream broke off; invoke again with the same idempotency_key to attach again\"}\n\n")
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := agentplane.NewClient(srv.URL, "k").WithRun("run_1", "ses_1")
	call, err := c.Agents().Invoke(ctx, "worker", "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	ev, err := call.Next()
	if err != nil || ev.Type != "run_started" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	start := time.Now()
	_, err = call.Next()
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v after %v and %d invokes, want the broken stream reported once the retries are spent", err, time.Since(start), invokes.Load())
	}
	if !strings.Contains(err.Error(), "stream_failed") {
		t.Errorf("Next = %v, want the platform's stream_failed named", err)
	}
	if n := invokes.Load(); n > agentplane.AgentMaxAttempts+1 {
		t.Fatalf("%d invokes: stream_failed was re-attached without bound", n)
	}
}

// An agent call whose platform (or a proxy before it) falls silent — no
// answer to the invoke, or a stream that stops mid-way without closing —
// is given up once its attaches are spent, with an error that says so:
// not context.Canceled (the read timeout's own cancel), which a caller
// would take for its ctx having ended.
func TestInvokeAgentSilentPlatformIsNotACancel(t *testing.T) {
	silent := func(t *testing.T, startStream bool) (*httptest.Server, *atomic.Int64) {
		hold := make(chan struct{})
		var invokes atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // so the server sees the client leave
			invokes.Add(1)
			if startStream {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("x-child-run-id", "run_child")
				w.WriteHeader(http.StatusOK)
				fmt.Fprint(w, "event: run_started\ndata: {\"type\":\"run_started\",\"session_id\":\"ses_1\",\"seq\":1,\"run_id\":\"run_child\",\"parent_run_id\":\"run_1\"}\n\n")
				w.(http.Flusher).Flush()
			}
			select { // then nothing, the connection held open
			case <-hold:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(hold); srv.Close() })
		return srv, &invokes
	}
	check := func(t *testing.T, ctx context.Context, err error, invokes int64) {
		t.Helper()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("err = %v (ctx %v), want the silent platform given up on", err, ctx.Err())
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v: reads as the caller's ctx ending", err)
		}
		if !strings.Contains(err.Error(), "did not answer") {
			t.Errorf("err = %v, want it to say the platform did not answer", err)
		}
		if invokes != int64(agentplane.AgentMaxAttempts) {
			t.Errorf("%d invokes, want %d", invokes, agentplane.AgentMaxAttempts)
		}
	}
	timing := agentplane.WithAgentTiming(200*time.Millisecond, 10*time.Millisecond)

	t.Run("no answer", func(t *testing.T) {
		srv, invokes := silent(t, false)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := agentplane.NewClient(srv.URL, "k").WithRun("run_1", "ses_1").Agents().Invoke(ctx, "worker", "hi", timing)
		check(t, ctx, err, invokes.Load())
	})
	t.Run("silent stream", func(t *testing.T) {
		srv, invokes := silent(t, true)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		call, err := agentplane.NewClient(srv.URL, "k").WithRun("run_1", "ses_1").Agents().Invoke(ctx, "worker", "hi", timing)
		if err != nil {
			t.Fatal(err)
		}
		defer call.Close()
		if ev, err := call.Next(); err != nil || ev.Type != "run_started" {
			t.Fatalf("first event %+v, %v", ev, err)
		}
		_, err = call.Next()
		// The first invoke's stream, then AgentMaxAttempts-1 attaches.
		check(t, ctx, err, invokes.Load())
	})
}
