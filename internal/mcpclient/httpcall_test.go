package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// connectWeb registers srv as "web" on a new manager and waits for it.
func connectWeb(t *testing.T, srv *httpServer) *mcpclient.Manager {
	t.Helper()
	m := newManager(t, "sqlite", nil)
	if _, _, err := m.Put(context.Background(), &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL()}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, "web", mcpclient.StatusConnected, 7)
	return m
}

// A tools/call on a Streamable HTTP session is a POST of its own (its id
// "ap-…", never one of the SDK session's numbers), whichever way the
// server answers (an event stream, or application/json): every kind of
// content, isError, a JSON-RPC error, progress, requests from the server
// during the call, and cancellation by the caller or the deadline.
func TestDirectCalls(t *testing.T) {
	for _, mode := range []struct {
		name   string
		json   bool
		events mcp.EventStore
	}{{"event-stream", false, nil}, {"json", true, nil}, {"event-stream with priming events", false, mcp.NewMemoryEventStore(nil)}} {
		t.Run(mode.name, func(t *testing.T) {
			srv := startHTTPServerWith(t, &mcp.StreamableHTTPOptions{JSONResponse: mode.json, EventStore: mode.events})
			m := connectWeb(t, srv)
			ctx := context.Background()

			res, err := call(m, "web", "echo", `{"text":"hi"}`)
			if err != nil || res.IsError || !strings.Contains(string(res.Content), `"text":"echo: hi"`) || res.StructuredContent != nil {
				t.Fatalf("echo: %+v %v", res, err)
			}
			if !srv.posted(`"method":"tools/call"`, `"id":"ap-`, `"text":"hi"`) {
				t.Fatal("the call was not a direct POST")
			}
			res, err = call(m, "web", "echo", `{"text":"fail"}`)
			if err != nil || !res.IsError || !strings.Contains(string(res.Content), "failed on purpose") {
				t.Fatalf("failing echo: %+v %v", res, err)
			}
			res, err = call(m, "web", "media", `{}`)
			if err != nil || !strings.Contains(string(res.Content), `"mimeType":"image/png","data":"iVBORw0KGgo="`) || !strings.Contains(string(res.Content), `"uri":"file:///r.csv"`) {
				t.Fatalf("media: %s %v", res.Content, err)
			}
			res, err = call(m, "web", "weather", `{}`)
			if err != nil || string(res.StructuredContent) != `{"conditions":"sunny","temp_c":21}` {
				t.Fatalf("weather: %+v %v", res, err)
			}
			// No arguments at all: an empty object is sent.
			res, err = m.CallMCP(ctx, toolsvc.MCPCall{Server: "web", Tool: "weather"})
			if err != nil || res.IsError {
				t.Fatalf("weather without args: %+v %v", res, err)
			}
			_, err = call(m, "web", "nope", `{}`)
			var rpcErr *toolsvc.MCPRPCError
			if err == nil || errors.Is(err, toolsvc.ErrMCPUnreachable) || errors.Is(err, toolsvc.ErrMCPOutcomeUnknown) || !strings.Contains(err.Error(), "nope") || !strings.Contains(err.Error(), "JSON-RPC error") ||
				!errors.As(err, &rpcErr) || rpcErr.Code == 0 {
				t.Fatalf("unknown tool: %v", err)
			}
			// The server asks the client something while the call runs
			// (on the call's stream, or on the session's own in JSON mode).
			res, err = call(m, "web", "asks", `{}`)
			if err != nil || res.IsError || !strings.Contains(string(res.Content), "roots: 0") {
				t.Fatalf("asks: %+v %v", res, err)
			}

			var mu sync.Mutex
			var got []string
			res, err = m.CallMCP(ctx, toolsvc.MCPCall{Server: "web", Tool: "progress", Args: json.RawMessage(`{"steps":3}`), ProgressToken: "tc_7",
				OnProgress: func(p, total float64, msg string) {
					mu.Lock()
					got = append(got, fmt.Sprintf("%g/%g %s", p, total, msg))
					mu.Unlock()
				}})
			if err != nil || res.IsError || !strings.Contains(string(res.Content), "done") {
				t.Fatalf("progress: %+v %v", res, err)
			}
			if !srv.posted(`"id":"ap-`, `"progressToken":"tc_7"`) {
				t.Fatal("the call did not carry its progress token")
			}
			if !mode.json {
				// On an event stream the progress comes before the answer.
				mu.Lock()
				if len(got) != 3 || got[0] != "1/3 step 1" || got[2] != "3/3 step 3" {
					t.Errorf("progress %v", got)
				}
				mu.Unlock()
			}

			// Cancelled by the caller: the request is cancelled on the server.
			cancelSlowCall(t, ctx, m, srv)
			waitFor(t, "notifications/cancelled", func() bool {
				return srv.posted(`"method":"notifications/cancelled"`, `"requestId":"ap-`, `"reason":"context canceled"`)
			})

			// The deadline: the same.
			dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer dcancel()
			began := time.Now()
			_, err = m.CallMCP(dctx, toolsvc.MCPCall{Server: "web", Tool: "slow", Args: json.RawMessage(`{}`)})
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 5*time.Second {
				t.Fatalf("call past its deadline: %v after %v", err, time.Since(began))
			}
			<-srv.ev.slowStarted
			select {
			case <-srv.ev.slowCancelled:
			case <-time.After(30 * time.Second):
				t.Fatal("the server never saw the deadline's cancellation")
			}
			waitFor(t, "the deadline's notifications/cancelled", func() bool {
				return srv.posted(`"method":"notifications/cancelled"`, `"reason":"context deadline exceeded"`)
			})

			// The session is still the first one, and serves calls.
			if n := srv.countMethod("initialize"); n != 1 {
				t.Fatalf("%d sessions", n)
			}
			if res, err := call(m, "web", "echo", `{"text":"still"}`); err != nil || !strings.Contains(string(res.Content), "echo: still") {
				t.Fatalf("after the cancellations: %+v %v", res, err)
			}
		})
	}
}

// A server that no longer knows the session answers 404: the call was
// refused, not run (the spec: a request on an ended session is answered
// 404), so it is unreachable rather than of unknown outcome; the session
// is replaced.
func TestDirectCallSessionExpired(t *testing.T) {
	srv := startHTTPServer(t)
	m := connectWeb(t, srv)
	if res, err := call(m, "web", "echo", `{"text":"hi"}`); err != nil || res.IsError {
		t.Fatalf("echo: %+v %v", res, err)
	}
	srv.forgetSessions()
	_, err := call(m, "web", "echo", `{"text":"lost"}`)
	if !errors.Is(err, toolsvc.ErrMCPUnreachable) || errors.Is(err, toolsvc.ErrMCPOutcomeUnknown) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("call on a forgotten session: %v", err)
	}
	waitFor(t, "a new session", func() bool { return srv.countMethod("initialize") == 2 })
	waitStatus(t, m, "web", mcpclient.StatusConnected, 7)
	if res, err := call(m, "web", "echo", `{"text":"again"}`); err != nil || !strings.Contains(string(res.Content), "echo: again") {
		t.Fatalf("on the new session: %+v %v", res, err)
	}
}

// A server that goes away while a call runs: the outcome is unknown, at
// once.
func TestDirectCallServerLost(t *testing.T) {
	srv := startHTTPServer(t)
	m := connectWeb(t, srv)
	errc := make(chan error, 1)
	go func() { _, err := call(m, "web", "slow", `{}`); errc <- err }()
	<-srv.ev.slowStarted
	srv.down()
	select {
	case err := <-errc:
		if !errors.Is(err, toolsvc.ErrMCPOutcomeUnknown) {
			t.Fatalf("call when the server went away: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end when its server went away")
	}
}

// BenchmarkCallMCP compares a tools/call made directly with one made
// through the SDK's CallTool, on the same session of a go-sdk server in
// this process: go test ./internal/mcpclient -run XXX -bench CallMCP -benchmem
func BenchmarkCallMCP(b *testing.B) {
	for _, way := range []struct {
		name string
		sdk  bool
	}{{"direct", false}, {"sdk", true}} {
		b.Run(way.name, func(b *testing.B) {
			mcpclient.SetSDKCalls(way.sdk)
			defer mcpclient.SetSDKCalls(false)
			srv := startHTTPServerWith(b, nil)
			m := newManager(b, "sqlite", &logBuffer{})
			if _, _, err := m.Put(context.Background(), &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL()}); err != nil {
				b.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); ; {
				if s, ok := m.MCPServer("web"); ok && s.Connected {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("not connected")
				}
				time.Sleep(10 * time.Millisecond)
			}
			args := json.RawMessage(`{"text":"bench"}`)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := m.CallMCP(ctx, toolsvc.MCPCall{Server: "web", Tool: "echo", Args: args})
				cancel()
				if err != nil || res.IsError {
					b.Fatal(res, err)
				}
			}
		})
	}
}
