package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testClient reaches loopback agents, the way tests must (ParseAllowlist
// with the loopback ranges), with timeouts generous enough for -race.
func testClient(t testing.TB) *Client {
	return &Client{
		HTTP:             NewHTTPClient(mustAllowlist(t, "127.0.0.1/32,::1/128")),
		FirstByteTimeout: 5 * time.Second,
		IdleTimeout:      5 * time.Second,
	}
}

// agentServer runs h as a real HTTP agent, closed when the test ends;
// handlers that wait use waitGone so they end with the client or the test.
func agentServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// startSSE writes the stream headers; send writes one event and flushes it.
func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
}

func send(w http.ResponseWriter, event, data string) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
	_ = http.NewResponseController(w).Flush()
}

// waitGone blocks until the client goes away or the test ends. It reads the
// request body first: net/http notices a closed connection (and cancels
// r.Context()) only once the body has been consumed, as real agents do.
func waitGone(t *testing.T, r *http.Request) bool {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
		return true
	case <-t.Context().Done():
		return false
	}
}

func raw(w http.ResponseWriter, s string) {
	_, _ = io.WriteString(w, s)
	_ = http.NewResponseController(w).Flush()
}

func invokeCode(t *testing.T, err error) string {
	t.Helper()
	var ie *InvokeError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v (%T) is not an *InvokeError", err, err)
	}
	return ie.Code
}

func collect(evs *[]StreamEvent) func(StreamEvent) error {
	return func(ev StreamEvent) error {
		*evs = append(*evs, ev)
		return nil
	}
}

var testReq = InvokeRequest{
	AgentID: "agent_a", SessionID: "ses_1", RunID: "run_1", UserID: "user_1",
	InputMessage: Message{Role: "user", Content: "hello"},
}

func TestInvokeHappyPath(t *testing.T) {
	t.Parallel()
	const n = 1000
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/base/invoke" {
			http.Error(w, "wrong route "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		startSSE(w)
		send(w, "state", `{"state":"thinking","detail":{"step":1},"extra":true}`)
		for i := range n {
			send(w, "delta", fmt.Sprintf(`{"text":"t%d","unknown":[1,2]}`, i))
		}
		send(w, "done", `{"usage":{"prompt_tokens":3,"completion_tokens":5}}`)
	})
	var evs []StreamEvent
	res, err := testClient(t).Invoke(t.Context(), srv.URL+"/base/", testReq, collect(&evs))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n+1 {
		t.Fatalf("got %d events, want %d", len(evs), n+1)
	}
	if evs[0].Type != "state" || evs[0].State != "thinking" || string(evs[0].Detail) != `{"step":1}` {
		t.Fatalf("state event = %+v", evs[0])
	}
	for i, ev := range evs[1:] {
		if ev.Type != "delta" || ev.Text != fmt.Sprintf("t%d", i) {
			t.Fatalf("event %d = %+v", i+1, ev)
		}
	}
	if string(res.Usage) != `{"prompt_tokens":3,"completion_tokens":5}` {
		t.Fatalf("usage = %s", res.Usage)
	}
}

func TestInvokeSendsHeadersAndBody(t *testing.T) {
	t.Parallel()
	type got struct {
		header http.Header
		body   map[string]any
	}
	seen := make(chan got, 2)
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		seen <- got{r.Header.Clone(), body}
		startSSE(w)
		send(w, "done", `{}`)
	})
	c := testClient(t)

	// Without a traceparent one is generated; without a parent or transcript
	// the body has no parent_run_id and an empty messages array.
	res, err := c.Invoke(t.Context(), srv.URL, testReq, collect(new([]StreamEvent)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage != nil {
		t.Errorf("usage = %s, want nil", res.Usage)
	}
	g := <-seen
	tp := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)
	if !tp.MatchString(g.header.Get("traceparent")) {
		t.Errorf("traceparent = %q", g.header.Get("traceparent"))
	}
	for h, want := range map[string]string{
		"x-run-id": "run_1", "x-session-id": "ses_1", "Accept": "text/event-stream", "Content-Type": "application/json",
	} {
		if v := g.header.Get(h); v != want {
			t.Errorf("header %s = %q, want %q", h, v, want)
		}
	}
	wantBody := map[string]any{
		"agent_id": "agent_a", "session_id": "ses_1", "run_id": "run_1", "depth": float64(0),
		"input_message": map[string]any{"role": "user", "content": "hello"},
		"messages":      []any{},
		"context":       map[string]any{"user_id": "user_1"},
	}
	if fmt.Sprint(g.body) != fmt.Sprint(wantBody) {
		t.Errorf("body = %v\nwant %v", g.body, wantBody)
	}

	// A valid traceparent is passed through; parent and transcript are sent.
	req := testReq
	req.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req.ParentRunID = "run_0"
	req.Depth = 2
	req.Messages = []Message{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "reply"}}
	if _, err := c.Invoke(t.Context(), srv.URL, req, collect(new([]StreamEvent))); err != nil {
		t.Fatal(err)
	}
	g = <-seen
	if v := g.header.Get("traceparent"); v != req.Traceparent {
		t.Errorf("traceparent = %q, want %q", v, req.Traceparent)
	}
	if g.body["parent_run_id"] != "run_0" || g.body["depth"] != float64(2) {
		t.Errorf("parent_run_id = %v, depth = %v", g.body["parent_run_id"], g.body["depth"])
	}
	if msgs, _ := g.body["messages"].([]any); len(msgs) != 2 {
		t.Errorf("messages = %v", g.body["messages"])
	}
}

func TestInvokeStreamFormats(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 512<<10)
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		raw(w, ": keep-alive\r\n\r\n")
		raw(w, "event: delta\r\ndata: {\"text\":\r\ndata:  \"a\\nb\"}\r\n\r\n")     // JSON over two data lines, CRLF
		raw(w, "event:delta\rdata:{\"text\":\"c\"}\r\r")                            // CR only, no spaces
		raw(w, ":\n\n: comment between events\nevent: delta\n: and inside\ndata: ") // split mid-event
		raw(w, "{\"text\":\"d\"}\n\n")
		raw(w, "data:\n\n") // untyped, empty: ignored
		raw(w, "event: delta\ndata: {\"text\":\""+big+"\"}\n\n")
		raw(w, "event: done\ndata:\n\n") // usage is optional
	})
	var evs []StreamEvent
	res, err := testClient(t).Invoke(t.Context(), srv.URL, testReq, collect(&evs))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, ev := range evs {
		texts = append(texts, ev.Text)
	}
	if len(texts) != 4 || texts[0] != "a\nb" || texts[1] != "c" || texts[2] != "d" || texts[3] != big {
		t.Fatalf("texts = %.40q", texts)
	}
	if res.Usage != nil {
		t.Fatalf("usage = %s", res.Usage)
	}
}

func TestInvokeErrors(t *testing.T) {
	t.Parallel()
	redirectTarget := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("redirect was followed to %s", r.URL)
	})
	tests := []struct {
		name    string
		handler http.HandlerFunc
		code    string
		status  int
		msg     string // substring of the message
		max     int
	}{
		{"500", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "model exploded "+strings.Repeat("!", 5000), http.StatusInternalServerError)
		}, CodeAgentHTTPError, 500, "model exploded", 0},
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, CodeAgentHTTPError, 404, "404", 0},
		{"not event-stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"text":"hi"}`)
		}, CodeAgentHTTPError, 200, "application/json", 0},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, redirectTarget.URL+"/invoke", http.StatusTemporaryRedirect)
		}, CodeAgentHTTPError, 307, "307", 0},
		{"malformed JSON", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":`)
		}, CodeAgentProtocolError, 0, "delta", 0},
		{"JSON not an object", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `"hi"`)
		}, CodeAgentProtocolError, 0, "delta", 0},
		{"wrong JSON type", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":5}`)
		}, CodeAgentProtocolError, 0, "delta", 0},
		{"state without state", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "state", `{"detail":{}}`)
		}, CodeAgentProtocolError, 0, "state", 0},
		{"bad done", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "done", `{"usage":`)
		}, CodeAgentProtocolError, 0, "done", 0},
		{"unknown event type", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "tool_request", `{}`)
		}, CodeAgentProtocolError, 0, "tool_request", 0},
		{"untyped event with data", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			raw(w, "data: {\"text\":\"hi\"}\n\n")
		}, CodeAgentProtocolError, 0, "event type", 0},
		{"oversize event", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":"`+strings.Repeat("x", 4096)+`"}`)
		}, CodeAgentProtocolError, 0, "too large", 1024},
		{"close without done", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":"partial"}`)
		}, CodeAgentDisconnected, 0, "without done", 0},
		{"close mid-event", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			raw(w, "event: done\ndata: {}\n")
		}, CodeAgentDisconnected, 0, "", 0},
		{"connection dropped", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":"partial"}`)
			panic(http.ErrAbortHandler)
		}, CodeAgentDisconnected, 0, "", 0},
		{"hijacked before answering", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		}, CodeAgentDisconnected, 0, "", 0},
		{"agent error", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":"x"}`)
			send(w, "error", `{"code":"rate_limited","message":"slow down"}`)
		}, "rate_limited", 0, "slow down", 0},
		{"agent error without code", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "error", `{"message":"boom"}`)
		}, CodeAgentError, 0, "boom", 0},
		{"agent error not JSON", func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "error", `plain words`)
		}, CodeAgentError, 0, "plain words", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := agentServer(t, tt.handler)
			c := testClient(t)
			c.MaxEventBytes = tt.max
			res, err := c.Invoke(t.Context(), srv.URL, testReq, collect(new([]StreamEvent)))
			if err == nil {
				t.Fatalf("succeeded: %+v", res)
			}
			var ie *InvokeError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T) is not an *InvokeError", err, err)
			}
			if ie.Code != tt.code || ie.Status != tt.status || !strings.Contains(ie.Message, tt.msg) {
				t.Fatalf("error = %+v, want code %q status %d message containing %q", ie, tt.code, tt.status, tt.msg)
			}
			if len(ie.Message) > 5000 {
				t.Fatalf("message is not bounded: %d bytes", len(ie.Message))
			}
		})
	}
}

func TestInvokeFirstByteTimeout(t *testing.T) {
	t.Parallel()
	handlers := map[string]func(t *testing.T) http.HandlerFunc{
		"no headers": func(t *testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { waitGone(t, r) }
		},
		"headers, then silence": func(t *testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				waitGone(t, r)
			}
		},
		// Keep-alives, then silence before any event: the first event's
		// deadline counts from the last bytes.
		"keep-alives, then silence": func(t *testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				raw(w, ": keep-alive\n\n")
				waitGone(t, r)
			}
		},
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := agentServer(t, h(t))
			c := testClient(t)
			c.FirstByteTimeout = 200 * time.Millisecond
			start := time.Now()
			_, err := c.Invoke(t.Context(), srv.URL, testReq, collect(new([]StreamEvent)))
			if code := invokeCode(t, err); code != CodeAgentTimeout {
				t.Fatalf("code = %s (%v), want agent_timeout", code, err)
			}
			if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
				t.Fatalf("timed out after %v, want about 200ms", d)
			}
		})
	}
	// A handler busy before its first event (a slow tool or LLM call) says
	// so with keep-alives, as the SDKs do: 4.5 s of them, three times the
	// first event's deadline, then the answer. The window is wide because
	// a loaded CI machine under -race can stall a goroutine for hundreds of
	// milliseconds.
	t.Run("keep-alives before the first event keep it open", func(t *testing.T) {
		t.Parallel()
		srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			for range 90 {
				time.Sleep(50 * time.Millisecond)
				raw(w, ": keep-alive\n\n")
			}
			send(w, "delta", `{"text":"late"}`)
			send(w, "done", `{}`)
		})
		c := testClient(t)
		c.FirstByteTimeout = 1500 * time.Millisecond
		var evs []StreamEvent
		if _, err := c.Invoke(t.Context(), srv.URL, testReq, collect(&evs)); err != nil || len(evs) != 1 {
			t.Fatalf("%v, %d events", err, len(evs))
		}
	})
}

func TestInvokeIdleTimeout(t *testing.T) {
	t.Parallel()
	t.Run("silence", func(t *testing.T) {
		t.Parallel()
		srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":"a"}`)
			waitGone(t, r)
		})
		c := testClient(t)
		c.IdleTimeout = 200 * time.Millisecond
		var evs []StreamEvent
		start := time.Now()
		_, err := c.Invoke(t.Context(), srv.URL, testReq, collect(&evs))
		if code := invokeCode(t, err); code != CodeAgentTimeout || len(evs) != 1 {
			t.Fatalf("code = %s (%v), %d events; want agent_timeout after 1 event", code, err, len(evs))
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("timed out after %v", d)
		}
	})
	t.Run("keep-alives keep it open", func(t *testing.T) {
		t.Parallel()
		srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "state", `{"state":"working"}`)
			// 4.5 s of keep-alives, three times the idle timeout. The window
			// is wide because a loaded CI machine under -race can stall a
			// goroutine for hundreds of milliseconds.
			for range 90 {
				time.Sleep(50 * time.Millisecond)
				raw(w, ": keep-alive\n\n")
			}
			send(w, "done", `{}`)
		})
		c := testClient(t)
		c.IdleTimeout = 1500 * time.Millisecond
		if _, err := c.Invoke(t.Context(), srv.URL, testReq, collect(new([]StreamEvent))); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("slow handler is not agent silence", func(t *testing.T) {
		t.Parallel()
		srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "delta", `{"text":"a"}`)
			send(w, "delta", `{"text":"b"}`)
			send(w, "done", `{}`)
		})
		c := testClient(t)
		c.IdleTimeout = 200 * time.Millisecond
		_, err := c.Invoke(t.Context(), srv.URL, testReq, func(StreamEvent) error {
			time.Sleep(400 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestInvokeCancel(t *testing.T) {
	t.Parallel()
	gone := make(chan struct{})
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		send(w, "delta", `{"text":"first"}`)
		if waitGone(t, r) {
			close(gone)
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := testClient(t).Invoke(ctx, srv.URL, testReq, func(StreamEvent) error {
			once.Do(func() { close(first) })
			return nil
		})
		errc <- err
	}()
	<-first
	time.Sleep(50 * time.Millisecond) // let Invoke block reading the stream
	cancel()
	start := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Invoke did not return after cancel")
	}
	select {
	case <-gone:
		t.Logf("agent saw the disconnect %v after cancel", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("the agent's request context was not cancelled")
	}
}

func TestInvokeHandlerErrorAborts(t *testing.T) {
	t.Parallel()
	gone := make(chan struct{})
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		send(w, "delta", `{"text":"a"}`)
		if waitGone(t, r) {
			close(gone)
		}
	})
	errStop := errors.New("store is full")
	_, err := testClient(t).Invoke(t.Context(), srv.URL, testReq, func(StreamEvent) error { return errStop })
	if err != errStop {
		t.Fatalf("err = %v, want the handler's error as is", err)
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("the agent's request was not closed")
	}
}

func TestInvokeUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now

	_, err = testClient(t).Invoke(t.Context(), "http://"+addr, testReq, collect(new([]StreamEvent)))
	if code := invokeCode(t, err); code != CodeAgentUnreachable {
		t.Fatalf("refused: code = %s (%v)", code, err)
	}

	a := mustAllowlist(t, "nx.internal")
	a.LookupIP = fakeDNS(nil)
	c := &Client{HTTP: NewHTTPClient(a)}
	_, err = c.Invoke(t.Context(), "http://nx.internal:80", testReq, collect(new([]StreamEvent)))
	var dnsErr *net.DNSError
	if code := invokeCode(t, err); code != CodeAgentUnreachable || !errors.As(err, &dnsErr) {
		t.Fatalf("DNS failure: code = %s (%v)", code, err)
	}
}

func TestInvokeInvalidEndpoint(t *testing.T) {
	t.Parallel()
	for _, ep := range []string{"file:///etc/passwd", "http://u:p@127.0.0.1/", "gopher://127.0.0.1/", "::"} {
		_, err := testClient(t).Invoke(t.Context(), ep, testReq, collect(new([]StreamEvent)))
		if code := invokeCode(t, err); code != CodeInvalidEndpoint {
			t.Errorf("Invoke(%q): code = %s (%v)", ep, code, err)
		}
	}
}

// The dial-time check: an httptest agent on 127.0.0.1 named by a hostname is
// refused when loopback is not allowlisted, including when the name resolved
// to a public address at validation (DNS rebinding).
func TestInvokeRefusedAtDial(t *testing.T) {
	t.Parallel()
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a refused agent received %s %s", r.Method, r.URL)
	})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	endpoint := "http://agent.test:" + port

	var mu sync.Mutex
	answer := "93.184.216.34"
	a := &Allowlist{LookupIP: func(context.Context, string) ([]net.IP, error) {
		mu.Lock()
		defer mu.Unlock()
		return []net.IP{net.ParseIP(answer)}, nil
	}}
	if _, err := a.ValidateEndpoint(t.Context(), endpoint); err != nil {
		t.Fatalf("validation with a public answer: %v", err)
	}
	mu.Lock()
	answer = "127.0.0.1" // rebind
	mu.Unlock()

	for _, ep := range []string{endpoint, srv.URL} {
		c := &Client{HTTP: NewHTTPClient(a)}
		_, err := c.Invoke(t.Context(), ep, testReq, collect(new([]StreamEvent)))
		if code := invokeCode(t, err); code != CodeEndpointNotAllowed {
			t.Fatalf("Invoke(%s): code = %s (%v)", ep, code, err)
		}
		if err := c.Probe(t.Context(), ep); invokeCode(t, err) != CodeEndpointNotAllowed {
			t.Fatalf("Probe(%s): %v", ep, err)
		}
	}

	// The default client (nil HTTP) reaches public addresses only.
	_, err := (&Client{}).Invoke(t.Context(), srv.URL, testReq, collect(new([]StreamEvent)))
	if code := invokeCode(t, err); code != CodeEndpointNotAllowed {
		t.Fatalf("default client: code = %s (%v)", code, err)
	}
}

// An allowlisted hostname may resolve anywhere, loopback included.
func TestInvokeAllowlistedHostname(t *testing.T) {
	t.Parallel()
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "" || !strings.HasPrefix(r.Host, "agent.internal:") {
			t.Errorf("Host = %q", r.Host)
		}
		startSSE(w)
		send(w, "done", `{}`)
	})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	a := mustAllowlist(t, "agent.internal")
	a.LookupIP = fakeDNS(map[string][]string{"agent.internal": {"127.0.0.1"}})
	c := &Client{HTTP: NewHTTPClient(a)}
	if _, err := c.Invoke(t.Context(), "http://agent.internal:"+port, testReq, collect(new([]StreamEvent))); err != nil {
		t.Fatal(err)
	}
}

// A proxy would do the dialling and so bypass the dial-time check: the
// client must not use one even when the environment names one.
func TestInvokeIgnoresProxyEnvironment(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request went through the proxy: %s", r.URL)
		http.Error(w, "proxied", http.StatusBadGateway)
	}))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")

	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		send(w, "done", `{}`)
	})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	a := mustAllowlist(t, "agent.internal")
	a.LookupIP = fakeDNS(map[string][]string{"agent.internal": {"127.0.0.1"}})
	hc := NewHTTPClient(a)
	if tr, ok := hc.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Fatalf("transport %T has a proxy function", hc.Transport)
	}
	if _, err := (&Client{HTTP: hc}).Invoke(t.Context(), "http://agent.internal:"+port, testReq, collect(new([]StreamEvent))); err != nil {
		t.Fatal(err)
	}
}

// Timeouts and cancellations must not leave goroutines behind.
func TestInvokeNoGoroutineLeak(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("mode") == "silent" {
			startSSE(w)
			send(w, "delta", `{"text":"a"}`)
		}
		waitGone(t, r)
	}))
	hc := NewHTTPClient(mustAllowlist(t, "127.0.0.1/32"))
	c := &Client{HTTP: hc, FirstByteTimeout: 50 * time.Millisecond, IdleTimeout: 50 * time.Millisecond}
	before := runtime.NumGoroutine()
	for i := range 20 {
		mode := "silent"
		if i%2 == 0 {
			mode = "headers"
		}
		_, err := c.Invoke(t.Context(), srv.URL+"/?mode="+mode, testReq, collect(new([]StreamEvent)))
		if code := invokeCode(t, err); code != CodeAgentTimeout {
			t.Fatalf("code = %s (%v)", code, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		_, err = (&Client{HTTP: hc}).Invoke(ctx, srv.URL, testReq, collect(new([]StreamEvent)))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
	}
	hc.CloseIdleConnections()
	srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// Silence while the run is paused (waiting for an approval or a client
// tool) is excused, before and after the first event; once the pause ends
// the timeout applies again.
func TestInvokeTimeoutsExcusedWhilePaused(t *testing.T) {
	t.Parallel()
	for _, first := range []bool{false, true} {
		t.Run(fmt.Sprint("after first event ", first), func(t *testing.T) {
			t.Parallel()
			srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
				startSSE(w)
				if first {
					send(w, "delta", `{"text":"a"}`)
				}
				waitGone(t, r)
			})
			c := testClient(t)
			c.IdleTimeout, c.FirstByteTimeout = 100*time.Millisecond, 100*time.Millisecond
			var checks atomic.Int32
			req := testReq
			// Paused for the first five timeout periods, then not.
			req.Paused = func() bool { return checks.Add(1) <= 5 }
			_, err := c.Invoke(t.Context(), srv.URL, req, collect(new([]StreamEvent)))
			if code := invokeCode(t, err); code != CodeAgentTimeout {
				t.Fatalf("code = %s (%v), want agent_timeout once the pause ends", code, err)
			}
			if n := checks.Load(); n != 6 {
				t.Fatalf("paused asked %d times, want 6 (5 excused, then the timeout)", n)
			}
		})
	}
}

// TestInvokeInputRequired: `event: input_required` ends the agent's turn
// with its question (issue 10): Invoke returns at once, closes the request
// whatever the agent sends after it, and sends intention_id and
// resumes_run_id in the body; a question that is missing or empty is a
// protocol error.
func TestInvokeInputRequired(t *testing.T) {
	gone := make(chan bool, 1)
	var body map[string]any
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&body)
		startSSE(w)
		send(w, "delta", `{"text":"hm"}`)
		send(w, "input_required", `{"question":"Which city?","detail":{"k":1}}`)
		send(w, "delta", `{"text":"ignored"}`)
		gone <- waitGone(t, r)
	})
	var evs []StreamEvent
	res, err := testClient(t).Invoke(context.Background(), srv.URL, InvokeRequest{RunID: "run_1", IntentionID: "int_1", ResumesRunID: "run_0"}, collect(&evs))
	if err != nil {
		t.Fatal(err)
	}
	if res.InputRequired == nil || res.InputRequired.Question != "Which city?" || string(res.InputRequired.Detail) != `{"k":1}` {
		t.Fatalf("result %+v", res)
	}
	if len(evs) != 1 || evs[0].Text != "hm" {
		t.Errorf("events %+v", evs)
	}
	if !<-gone {
		t.Error("the request was not closed after input_required")
	}
	if body["intention_id"] != "int_1" || body["resumes_run_id"] != "run_0" {
		t.Errorf("body %v", body)
	}
	for _, data := range []string{`{}`, `{"question":""}`, `{"question":7}`, `"Which city?"`} {
		srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
			startSSE(w)
			send(w, "input_required", data)
		})
		_, err := testClient(t).Invoke(context.Background(), srv.URL, InvokeRequest{RunID: "run_1"}, collect(&evs))
		if code := invokeCode(t, err); code != CodeAgentProtocolError {
			t.Errorf("input_required %s: %s, want agent_protocol_error", data, code)
		}
	}
	// Without intention fields the body carries none.
	srv2 := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "resumes_run_id") {
			t.Errorf("body %s names resumes_run_id", b)
		}
		startSSE(w)
		send(w, "done", `{}`)
	})
	if _, err := testClient(t).Invoke(context.Background(), srv2.URL, InvokeRequest{RunID: "run_1"}, collect(&evs)); err != nil {
		t.Fatal(err)
	}
}
