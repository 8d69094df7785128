package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// The MCP servers these tests connect to are real go-sdk servers: over
// Streamable HTTP on a loopback listener, and over stdio as this test
// binary started again in server mode (TestMain).

const stdioServerEnv = "MCPCLIENT_TEST_STDIO_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(stdioServerEnv) == "1" {
		fmt.Fprintln(os.Stderr, "test stdio server starting")
		s := newTestServer(nil)
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "test stdio server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serverEvents lets a test see what the server's tools saw.
type serverEvents struct {
	slowStarted   chan struct{}
	slowCancelled chan string
	release       chan struct{}
}

func newServerEvents() *serverEvents {
	return &serverEvents{slowStarted: make(chan struct{}, 16), slowCancelled: make(chan string, 16), release: make(chan struct{})}
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type stepsIn struct {
	Steps int `json:"steps"`
}

// newTestServer is an MCP server with the tools the tests call.
func newTestServer(ev *serverEvents) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "1.0.0"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes its text."}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		if in.Text == "fail" {
			return nil, nil, fmt.Errorf("failed on purpose")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "media", Description: "Answers an image and a resource."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "see attached"},
			&mcp.ImageContent{Data: []byte("\x89PNG\r\n\x1a\n"), MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///r.csv", MIMEType: "text/csv", Text: "a,b\n1,2\n"}},
		}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "weather", Description: "Structured weather."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{"temp_c": 21, "conditions": "sunny"}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Reports progress, then answers."}, func(ctx context.Context, req *mcp.CallToolRequest, in stepsIn) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		for i := 1; i <= in.Steps; i++ {
			if tok != nil {
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(in.Steps), Message: fmt.Sprintf("step %d", i)})
			}
			time.Sleep(20 * time.Millisecond)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "asks", Description: "Asks the client for a ping and its roots while it runs."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if err := req.Session.Ping(ctx, nil); err != nil {
			return nil, nil, fmt.Errorf("ping: %w", err)
		}
		roots, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("roots/list: %w", err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("roots: %d", len(roots.Roots))}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Its process's environment, and the request's _meta."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{"env": os.Environ(), "pid": os.Getpid(), "meta": req.Params.Meta}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Waits until released or cancelled."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if ev == nil {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		}
		ev.slowStarted <- struct{}{}
		select {
		case <-ev.release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		case <-ctx.Done():
			ev.slowCancelled <- context.Cause(ctx).Error()
			return nil, nil, ctx.Err()
		}
	})
	return s
}

// httpServer is a Streamable HTTP MCP server on a fixed loopback address
// that can go down and come back, recording the JSON-RPC messages POSTed
// to it.
type httpServer struct {
	t     testing.TB
	addr  string
	mcp   *mcp.Server
	ev    *serverEvents
	mu    sync.Mutex
	posts []string
	// traceparents[i] and apiKeys[i] are the traceparent and X-Api-Key
	// headers of posts[i] ("" if none).
	traceparents, apiKeys []string
	srv                   *http.Server
	closed                chan struct{}
	// conns counts the TCP connections accepted.
	conns atomic.Int64
	// opts are the Streamable HTTP handler's options (nil: the defaults,
	// answers on event streams).
	opts *mcp.StreamableHTTPOptions
	// stream is the Streamable HTTP handler serving requests now.
	stream atomic.Pointer[mcp.StreamableHTTPHandler]
}

func startHTTPServer(t *testing.T) *httpServer {
	return startHTTPServerWith(t, nil)
}

func startHTTPServerWith(t testing.TB, opts *mcp.StreamableHTTPOptions) *httpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ev := newServerEvents()
	h := &httpServer{t: t, addr: ln.Addr().String(), ev: ev, mcp: newTestServer(ev), opts: opts}
	h.serve(ln)
	t.Cleanup(h.down)
	return h
}

func (h *httpServer) URL() string { return "http://" + h.addr + "/mcp" }

// forgetSessions makes the server answer every request from now on with a
// fresh handler, which knows no session (as a server restarted behind the
// same address would), while the requests in flight — the client's
// standalone stream among them — go on.
func (h *httpServer) forgetSessions() {
	h.stream.Store(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.mcp }, h.opts))
}

func (h *httpServer) serve(ln net.Listener) {
	h.forgetSessions()
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream := h.stream.Load()
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			h.mu.Lock()
			h.posts = append(h.posts, string(b))
			h.traceparents = append(h.traceparents, r.Header.Get("traceparent"))
			h.apiKeys = append(h.apiKeys, r.Header.Get("X-Api-Key"))
			h.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		stream.ServeHTTP(w, r)
	}), ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			h.conns.Add(1)
		}
	}}
	h.closed = make(chan struct{})
	go func() { h.srv.Serve(ln); close(h.closed) }()
}

// down closes the listener and every connection, as a crash would.
func (h *httpServer) down() {
	if h.srv == nil {
		return
	}
	h.srv.Close()
	<-h.closed
	h.srv = nil
}

// up serves again on the same address, with a fresh MCP server.
func (h *httpServer) up() {
	h.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", h.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatalf("listen again on %s: %v", h.addr, err)
	}
	h.mcp = newTestServer(h.ev)
	h.serve(ln)
}

// posted reports whether some POSTed message contains all of parts.
func (h *httpServer) posted(parts ...string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.posts {
		ok := true
		for _, part := range parts {
			ok = ok && strings.Contains(p, part)
		}
		if ok {
			return true
		}
	}
	return false
}

// countMethod counts the POSTed requests of a JSON-RPC method.
func (h *httpServer) countMethod(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.posts {
		if strings.Contains(p, `"method":"`+method+`"`) {
			n++
		}
	}
	return n
}

// cancelSlowCall calls the server's "slow" tool through m, cancels the
// call's context once the server runs it, and checks that the call returns
// context.Canceled and that the server's handler is cancelled too; it
// returns what the handler saw.
func cancelSlowCall(t *testing.T, ctx context.Context, m *mcpclient.Manager, srv *httpServer) string {
	t.Helper()
	cctx, ccancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := m.CallMCP(cctx, toolsvc.MCPCall{Server: "web", Tool: "slow", Args: json.RawMessage(`{}`)})
		errc <- err
	}()
	<-srv.ev.slowStarted
	ccancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	select {
	case why := <-srv.ev.slowCancelled:
		return why
	case <-time.After(30 * time.Second):
		t.Fatal("the server never saw the cancellation")
		return ""
	}
}
