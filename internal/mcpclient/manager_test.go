package mcpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
	"github.com/agentplane/agentplane/internal/tracing"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// logBuffer collects the manager's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newManager(t testing.TB, dialect string, logs *logBuffer) *mcpclient.Manager {
	t.Helper()
	allow, err := agent.ParseAllowlist("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m := mcpclient.New(testdb.Open(t, dialect), mcpclient.Options{
		Logger: logger, Allow: allow, ReconcileInterval: 100 * time.Millisecond,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, StopGrace: 500 * time.Millisecond,
	})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// waitStatus waits until the server's status is want (and, for connected,
// it lists at least minTools tools) and returns it.
func waitStatus(t *testing.T, m *mcpclient.Manager, name, want string, minTools int) *mcpclient.ServerInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := m.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status == want && info.ToolCount >= minTools {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("MCP server %s is %s (%s), tools %v; want %s", name, info.Status, info.LastError, info.Tools, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func call(m *mcpclient.Manager, server, name, args string) (*toolsvc.MCPResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.CallMCP(ctx, toolsvc.MCPCall{Server: server, Tool: name, Args: json.RawMessage(args)})
}

// A Streamable HTTP server: tools listed and kept fresh, calls with every
// kind of content, progress, a cancelled call cancelled on the wire, and
// a server that goes away and comes back.
func TestStreamableHTTPServer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		srv := startHTTPServer(t)
		m := newManager(t, dialect, nil)
		ctx := context.Background()

		info, created, err := m.Put(ctx, &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL(),
			Headers: map[string]string{"Authorization": "Bearer secret"}, Policy: tool.Policy{Decision: tool.DecisionRequireApproval}})
		if err != nil || !created {
			t.Fatalf("put: %v %v", info, err)
		}
		if info.Headers["Authorization"] != mcpclient.Redacted {
			t.Fatalf("header shown: %v", info.Headers)
		}
		info = waitStatus(t, m, "web", mcpclient.StatusConnected, 6)
		if !slices.Contains(info.Tools, "echo") || info.ProtocolVersion != "2025-11-25" || info.ServerName != "testserver" || info.LastConnectedAt == 0 {
			t.Fatalf("connected: %+v", info)
		}
		// One session, however often the registry is read again (every 100 ms here).
		time.Sleep(500 * time.Millisecond)
		if n := srv.countMethod("initialize"); n != 1 {
			t.Fatalf("%d initialize requests for one server", n)
		}
		srvState, ok := m.MCPServer("web")
		if !ok || !srvState.Connected || srvState.Defaults.Policy.Decision != tool.DecisionRequireApproval {
			t.Fatalf("MCPServer: %+v", srvState)
		}

		res, err := call(m, "web", "echo", `{"text":"hi"}`)
		if err != nil || res.IsError || !strings.Contains(string(res.Content), `"text":"echo: hi"`) {
			t.Fatalf("echo: %+v %v", res, err)
		}
		res, err = call(m, "web", "echo", `{"text":"fail"}`)
		if err != nil || !res.IsError || !strings.Contains(string(res.Content), "failed on purpose") {
			t.Fatalf("failing echo: %+v %v", res, err)
		}
		res, err = call(m, "web", "media", `{}`)
		if err != nil || !strings.Contains(string(res.Content), `"type":"image"`) || !strings.Contains(string(res.Content), `"mimeType":"image/png","data":"iVBORw0KGgo="`) ||
			!strings.Contains(string(res.Content), `"uri":"file:///r.csv"`) {
			t.Fatalf("media: %s %v", res.Content, err)
		}
		res, err = call(m, "web", "weather", `{}`)
		if err != nil || string(res.StructuredContent) != `{"conditions":"sunny","temp_c":21}` {
			t.Fatalf("weather: %+v %v", res, err)
		}
		// An unknown tool is the Go SDK server's JSON-RPC error: the
		// server's answer, neither unreachable nor unknown outcome.
		_, err = call(m, "web", "nope", `{}`)
		if err == nil || errors.Is(err, toolsvc.ErrMCPUnreachable) || errors.Is(err, toolsvc.ErrMCPOutcomeUnknown) || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("unknown tool: %v", err)
		}

		// Progress is asked for with the call's token and handed over.
		var mu sync.Mutex
		var got []string
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		res, err = m.CallMCP(pctx, toolsvc.MCPCall{Server: "web", Tool: "progress", Args: json.RawMessage(`{"steps":3}`), ProgressToken: "tc_1",
			OnProgress: func(p, total float64, msg string) {
				mu.Lock()
				got = append(got, fmt.Sprintf("%g/%g %s", p, total, msg))
				mu.Unlock()
			}})
		pcancel()
		if err != nil || res.IsError {
			t.Fatalf("progress: %+v %v", res, err)
		}
		if !srv.posted(`"progressToken":"tc_1"`, `"name":"progress"`) {
			t.Fatal("the call did not carry its progress token")
		}
		waitFor(t, "progress notifications", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 2 })
		mu.Lock()
		if got[0] != "1/3 step 1" {
			t.Errorf("progress %v", got)
		}
		mu.Unlock()

		// Cancelling the call's ctx cancels it on the server.
		t.Logf("the server's handler ended: %s", cancelSlowCall(t, ctx, m, srv))
		waitFor(t, "notifications/cancelled on the wire", func() bool { return srv.posted(`"method":"notifications/cancelled"`) })

		// A tool added at run time arrives with notifications/tools/list_changed.
		srv.mcp.AddTool(&mcp.Tool{Name: "late", Description: "Added later.", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil
		})
		waitFor(t, "the late tool", func() bool {
			s, _ := m.MCPServer("web")
			return slices.ContainsFunc(s.Tools, func(t tool.MCPListedTool) bool { return t.Name == "late" })
		})
		before, _ := m.MCPServer("web")

		// The server goes away: its tools stay known, calls fail at once.
		srv.down()
		waitFor(t, "the session to drop", func() bool { s, _ := m.MCPServer("web"); return !s.Connected })
		s, _ := m.MCPServer("web")
		if len(s.Tools) != len(before.Tools) || s.LastError == "" {
			t.Fatalf("while down: %+v", s)
		}
		began := time.Now()
		if _, err := call(m, "web", "echo", `{"text":"x"}`); !errors.Is(err, toolsvc.ErrMCPUnreachable) {
			t.Fatalf("call while down: %v", err)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Fatalf("a call to a server that is down took %v", d)
		}
		info = waitStatus(t, m, "web", mcpclient.StatusFailed, 0)
		if info.NextAttemptAt == 0 || info.LastError == "" {
			t.Fatalf("failed: %+v", info)
		}

		// It comes back (a new process: the late tool is gone) and is
		// reconnected and listed again.
		srv.up()
		waitStatus(t, m, "web", mcpclient.StatusConnected, 6)
		waitFor(t, "the relisting", func() bool {
			s, _ := m.MCPServer("web")
			return s.Version != before.Version && len(s.Tools) == len(before.Tools)-1
		})
		if res, err := call(m, "web", "echo", `{"text":"back"}`); err != nil || !strings.Contains(string(res.Content), "echo: back") {
			t.Fatalf("after the reconnect: %+v %v", res, err)
		}
		if !srv.posted(`"method":"initialize"`) {
			t.Fatal("no initialize seen")
		}

		// Deleted: no session, no tools.
		if err := m.Delete(ctx, "web"); err != nil {
			t.Fatal(err)
		}
		if _, ok := m.MCPServer("web"); ok {
			t.Fatal("a deleted server is still known")
		}
		if err := m.Delete(ctx, "web"); !errors.Is(err, mcpclient.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A stdio server: this test binary in server mode. Its stderr reaches the
// log with the server's name, it gets none of the platform's environment
// but what the spec gives, a process killed during a call fails that call
// (outcome unknown) and is started again, and deleting the server stops
// its process.
func TestStdioServer(t *testing.T) {
	t.Setenv("AGENTPLANE_ADMIN_KEY", "must-not-leak-0123456789")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testdb.Each(t, func(t *testing.T, dialect string) {
		logs := &logBuffer{}
		m := newManager(t, dialect, logs)
		ctx := context.Background()
		_, _, err := m.Put(ctx, &mcpclient.Spec{Name: "local", Transport: mcpclient.TransportStdio, Command: self,
			Args: []string{"-test.run=^$"}, Env: map[string]string{stdioServerEnv: "1", "GREETING": "hello"}})
		if err != nil {
			t.Fatal(err)
		}
		info := waitStatus(t, m, "local", mcpclient.StatusConnected, 6)
		if info.Env[stdioServerEnv] != mcpclient.Redacted || info.Command != self {
			t.Fatalf("info: %+v", info)
		}
		waitFor(t, "the server's stderr in the log", func() bool {
			return strings.Contains(logs.String(), `"mcp_server":"local"`) && strings.Contains(logs.String(), "test stdio server starting")
		})

		// Made in a span: the trace context goes in the request's _meta
		// (a stdio server has no headers).
		const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		tctx, cancel := context.WithTimeout(tracing.WithTraceparent(ctx, tp), 30*time.Second)
		defer cancel()
		res, err := m.CallMCP(tctx, toolsvc.MCPCall{Server: "local", Tool: "env", Args: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Env  []string       `json:"env"`
			PID  int            `json:"pid"`
			Meta map[string]any `json:"meta"`
		}
		if err := json.Unmarshal(res.StructuredContent, &out); err != nil {
			t.Fatal(err)
		}
		if out.Meta["traceparent"] != tp {
			t.Errorf("the stdio server got _meta %v, want traceparent %s", out.Meta, tp)
		}
		for _, kv := range out.Env {
			k, _, _ := strings.Cut(kv, "=")
			if !slices.Contains([]string{"PATH", "HOME", "LANG", "TMPDIR", stdioServerEnv, "GREETING"}, k) {
				t.Errorf("the server got %s from the platform's environment", k)
			}
		}
		if !slices.Contains(out.Env, "GREETING=hello") {
			t.Errorf("env %v lacks the spec's", out.Env)
		}
		firstPID := out.PID

		// Killed during a call: the call fails as "may have run", the
		// process is started again and answers.
		errc := make(chan error, 1)
		go func() { _, err := call(m, "local", "slow", `{}`); errc <- err }()
		time.Sleep(200 * time.Millisecond) // the request is on its way
		if err := syscall.Kill(firstPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, toolsvc.ErrMCPOutcomeUnknown) {
				t.Fatalf("call during the kill: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the call in flight never ended")
		}
		waitFor(t, "a new process", func() bool {
			res, err := call(m, "local", "env", `{}`)
			if err != nil {
				return false
			}
			json.Unmarshal(res.StructuredContent, &out)
			return out.PID != firstPID
		})
		secondPID := out.PID

		if err := m.Delete(ctx, "local"); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(secondPID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("the server's process %d is still there after the delete: %v", secondPID, err)
		}
	})
}

// What a spec may say, and that the SSRF rules apply to the URL.
func TestSpecChecks(t *testing.T) {
	m := newManager(t, "sqlite", nil)
	ctx := context.Background()
	for _, c := range []struct {
		spec  mcpclient.Spec
		field string
	}{
		{mcpclient.Spec{Name: "bad name", Transport: "stdio", Command: "x"}, "name"},
		{mcpclient.Spec{Name: "a--b", Transport: "stdio", Command: "x"}, "name"},
		{mcpclient.Spec{Name: "x", Transport: "sse", URL: "http://127.0.0.1/"}, "transport"},
		{mcpclient.Spec{Name: "x", Transport: "stdio"}, "command"},
		{mcpclient.Spec{Name: "x", Transport: "streamable_http"}, "url"},
		{mcpclient.Spec{Name: "x", Transport: "streamable_http", URL: "http://127.0.0.1/", Command: "y"}, "command"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "y", URL: "http://127.0.0.1/"}, "url"},
		{mcpclient.Spec{Name: "x", Transport: "streamable_http", URL: "http://127.0.0.1/", Headers: map[string]string{"Mcp-Session-Id": "1"}}, "headers"},
		{mcpclient.Spec{Name: "x", Transport: "streamable_http", URL: "http://127.0.0.1/", Headers: map[string]string{"X": "a\nb"}}, "headers"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "y", Env: map[string]string{"A=B": "1"}}, "env"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "y", Policy: tool.Policy{Decision: "maybe"}}, "policy.decision"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "y", Policy: tool.Policy{Rules: []tool.Rule{{When: "args.", Decision: "block"}}}}, "policy.rules[0].when"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "y", TimeoutMS: -5}, "timeout_ms"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "/nonexistent/mcp-server"}, "command"},
		{mcpclient.Spec{Name: "x", Transport: "stdio", Command: "no-such-mcp-server-on-path"}, "command"},
	} {
		_, _, err := m.Put(ctx, &c.spec)
		var re *respond.Error
		if !errors.As(err, &re) || re.Code != "invalid_mcp_server" || re.Details["field"] != c.field {
			t.Errorf("%+v: %v, want invalid_mcp_server on %s", c.spec, err, c.field)
		}
	}
	_, _, err := m.Put(ctx, &mcpclient.Spec{Name: "meta", Transport: "streamable_http", URL: "http://169.254.169.254/mcp"})
	var re *respond.Error
	if !errors.As(err, &re) || re.Code != agent.CodeEndpointNotAllowed {
		t.Fatalf("metadata address: %v", err)
	}
	if list, err := m.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("refused specs were stored: %v %v", list, err)
	}
	if _, err := mcpclient.DecodeSpec([]byte(`{"name":"x","transport":"stdio","command":"y","polcy":{}}`)); err == nil {
		t.Fatal("an unknown field was accepted")
	}
}

// A tools/call made in a span carries its traceparent to the MCP server,
// as a server tool's POST does; requests outside a span carry none. Every
// request, the SDK's and the platform's own tools/call, carries the
// spec's headers.
func TestStreamableHTTPCallCarriesTraceparent(t *testing.T) {
	srv := startHTTPServer(t)
	m := newManager(t, "sqlite", nil)
	if _, _, err := m.Put(context.Background(), &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL(),
		Headers: map[string]string{"x-api-key": "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, "web", mcpclient.StatusConnected, 1)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx, cancel := context.WithTimeout(tracing.WithTraceparent(context.Background(), tp), 30*time.Second)
	defer cancel()
	res, err := m.CallMCP(ctx, toolsvc.MCPCall{Server: "web", Tool: "echo", Args: json.RawMessage(`{"text":"traced"}`)})
	if err != nil || res.IsError {
		t.Fatalf("echo: %+v %v", res, err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var sawCall bool
	for i, body := range srv.posts {
		if srv.apiKeys[i] != "s3cret" {
			t.Errorf("%s sent with X-Api-Key %q, want the spec's", body, srv.apiKeys[i])
		}
		if strings.Contains(body, `"method":"tools/call"`) {
			sawCall = true
			if srv.traceparents[i] != tp {
				t.Errorf("tools/call sent with traceparent %q, want %q", srv.traceparents[i], tp)
			}
		} else if strings.Contains(body, `"method":"initialize"`) && srv.traceparents[i] != "" {
			t.Errorf("initialize (outside any span) sent with traceparent %q", srv.traceparents[i])
		}
	}
	if !sawCall {
		t.Fatalf("no tools/call among %d posts", len(srv.posts))
	}
}

// Calls made one after the other on a Streamable HTTP session reuse its
// connection, although each call's context (its deadline) ends as soon as
// it returns: ending it must not cut the SDK's read of the answer's stream
// short, which closes the connection instead of keeping it alive.
func TestStreamableHTTPCallsKeepTheConnection(t *testing.T) {
	srv := startHTTPServer(t)
	m := newManager(t, "sqlite", nil)
	if _, _, err := m.Put(context.Background(), &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL()}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, "web", mcpclient.StatusConnected, 1)
	// The first calls may open the connections the pool keeps from then on
	// (one more than the session's GET stream holds).
	for range 5 {
		if res, err := call(m, "web", "echo", `{"text":"warm"}`); err != nil || res.IsError {
			t.Fatalf("echo: %+v %v", res, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := srv.conns.Load()
	const calls = 200
	for i := range calls {
		if res, err := call(m, "web", "echo", `{"text":"again"}`); err != nil || res.IsError {
			t.Fatalf("echo %d: %+v %v", i, res, err)
		}
		// As sequential tool calls come: not back to back (a call's commits
		// come between).
		time.Sleep(time.Millisecond)
	}
	// A call may still, rarely, come before the previous one's stream has
	// been read to its end (and take another connection); one cut short
	// each time its context ended was one call in eight to one in four.
	if n := srv.conns.Load() - before; n > 4 {
		t.Fatalf("%d sequential calls opened %d new connections to the server, want (about) none", calls, n)
	}

	// Concurrent callers: a connection for each call in flight, kept.
	const callers, each = 8, 80
	before = srv.conns.Load()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if res, err := call(m, "web", "echo", `{"text":"together"}`); err != nil || res.IsError {
					errs <- fmt.Errorf("echo: %+v %v", res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := srv.conns.Load() - before; n > 2*callers {
		t.Fatalf("%d concurrent callers making %d calls opened %d new connections to the server, want at most %d", callers, callers*each, n, 2*callers)
	}
}
