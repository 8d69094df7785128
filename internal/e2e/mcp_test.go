package e2e

// End-to-end tests of MCP both ways (issue 12, DESIGN §13): the real binary
// on SQLite and PostgreSQL; as an MCP client, against the reference server
// of the MCP project (@modelcontextprotocol/server-everything, over stdio
// and Streamable HTTP) and a go-sdk server of this test that counts its
// calls; as an MCP server (/mcp), used by the go-sdk client and by the npm
// @modelcontextprotocol/sdk client, with approvals answered by a real
// WebSocket client.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ---------------------------------------------------------------------------
// Fixtures

// interop is tests/interop with its npm packages. Outside CI a missing node
// or package skips the test; in CI (CI=true) it fails it, so the interop
// tests cannot silently stop running.
type interop struct {
	node, dir, everything string
}

func needInterop(t *testing.T) interop {
	t.Helper()
	dir := filepath.Join(repoRoot, "tests", "interop")
	ev := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	missing := ""
	node, err := exec.LookPath("node")
	if err != nil {
		missing = "node is not on PATH"
	} else if _, err := os.Stat(ev); err != nil {
		missing = "tests/interop/node_modules/@modelcontextprotocol/server-everything is missing (run `npm ci` in tests/interop)"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		missing = "tests/interop/node_modules/@modelcontextprotocol/sdk is missing (run `npm ci` in tests/interop)"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MCP interop tests cannot run in CI: %s", missing)
		}
		t.Skipf("skipping the MCP interop tests: %s", missing)
	}
	return interop{node: node, dir: dir, everything: ev}
}

// everythingHTTP runs server-everything over Streamable HTTP on a free
// loopback port and returns its endpoint.
func (in interop) everythingHTTP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(in.node, in.everything, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("server-everything did not start")
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// mcpServerInfo is GET /v1/mcp_servers/{name}.
func mcpServerInfo(t *testing.T, s *server, name string) map[string]any {
	t.Helper()
	code, body := s.call("GET", "/v1/mcp_servers/"+name, adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("GET MCP server %s: %d %v", name, code, body)
	}
	return body
}

// waitMCPTools waits until the server is connected and offers every one
// of tools.
func waitMCPTools(t *testing.T, s *server, name string, tools ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		info := mcpServerInfo(t, s, name)
		have := map[string]bool{}
		for _, n := range info["tools"].([]any) {
			have[n.(string)] = true
		}
		ok := info["status"] == "connected"
		for _, want := range tools {
			ok = ok && have[want]
		}
		if ok {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("MCP server %s: %v; want connected with %v", name, info, tools)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agentFunctions is GET /v1/tools?run_id= as the agent sees it: function names.
func agentFunctions(t *testing.T, s *server, key, runID string) []string {
	t.Helper()
	code, body := s.call("GET", "/v1/tools?run_id="+runID, key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET tools: %d %v", code, body)
	}
	var out []string
	for _, ft := range body["tools"].([]any) {
		out = append(out, sv(obj(ft.(map[string]any), "function"), "name"))
	}
	return out
}

// sessionEvents is a session's log.
func sessionEventsOf(t *testing.T, s *server, sessionID, typ string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range s.events("/v1/sessions/" + sessionID + "/events") {
		if sv(e, "type") == typ {
			out = append(out, e)
		}
	}
	return out
}

// contentText joins the text blocks of an MCP result held in a tool call's
// result ({"content": [...]}).
func contentText(res map[string]any) string {
	var b strings.Builder
	for _, c := range res["content"].([]any) {
		if m := c.(map[string]any); m["type"] == "text" {
			b.WriteString(sv(m, "text"))
		}
	}
	return b.String()
}

// goMCPServer is a go-sdk MCP server of the test, over Streamable HTTP,
// that counts the calls of each tool: "add" {a, b} and "hold" {} (answers
// when released).
type goMCPServer struct {
	*httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	holding chan struct{}
	release chan struct{}
}

func newGoMCPServer(t *testing.T) *goMCPServer {
	t.Helper()
	g := &goMCPServer{calls: map[string]int{}, holding: make(chan struct{}, 16), release: make(chan struct{})}
	srv := mcp.NewServer(&mcp.Implementation{Name: "e2e-go", Version: "1.0.0"}, nil)
	type addIn struct {
		A float64 `json:"a" jsonschema:"first addend"`
		B float64 `json:"b" jsonschema:"second addend"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Adds two numbers."}, func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, map[string]any, error) {
		g.count("add")
		return nil, map[string]any{"sum": in.A + in.B}, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "refuse", Description: "Answers a JSON-RPC error."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		g.count("refuse")
		return nil, nil, &jsonrpc.Error{Code: -32001, Message: "custom rpc failure", Data: json.RawMessage(`{"why":"closed"}`)}
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "hold", Description: "Answers when released."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		g.count("hold")
		g.holding <- struct{}{}
		select {
		case <-g.release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	g.Server = httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
		g.CloseClientConnections()
		g.Close()
	})
	return g
}

func (g *goMCPServer) count(name string) {
	g.mu.Lock()
	g.calls[name]++
	g.mu.Unlock()
}

func (g *goMCPServer) called(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[name]
}

func putMCPServer(t *testing.T, s *server, name string, spec map[string]any) map[string]any {
	t.Helper()
	code, body := s.call("PUT", "/v1/mcp_servers/"+name, adminKey, spec)
	if code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("PUT MCP server %s: %d %v", name, code, body)
	}
	return body
}

// childPIDs are the processes whose parent is pid and whose command line
// contains all of parts.
func childPIDs(pid int, parts ...string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so cut after ")".
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(string(cmdline), p)
		}
		if ok {
			out = append(out, child)
		}
	}
	return out
}

// processesWithEnv are the processes whose environment holds kv.
func processesWithEnv(kv string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, v := range strings.Split(string(env), "\x00") {
			if v == kv {
				out = append(out, pid)
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// 1. server-everything over stdio, declared in the config file.

func TestMCPEverythingStdio(t *testing.T) {
	in := needInterop(t)
	eachStore(t, func(t *testing.T, dsn string) {
		cfg := filepath.Join(t.TempDir(), "agentplane.yaml")
		marker := "e2e-stdio-" + filepath.Base(t.TempDir())
		os.WriteFile(cfg, []byte(fmt.Sprintf(`mcp_servers:
  - name: everything
    transport: stdio
    command: %q
    args: [%q, "stdio"]
    env: {MARKER: %q}
    timeout_ms: 20000
    on_failure: return_to_agent
`, in.node, in.everything, marker)), 0o600)
		s := startServerEnv(t, dsn, []string{"AGENTPLANE_CONFIG=" + cfg})
		// get-roots-list is registered after initialize and announced with
		// notifications/tools/list_changed: its presence proves the relisting.
		info := waitMCPTools(t, s, "everything", "echo", "get-sum", "trigger-long-running-operation", "get-tiny-image", "get-roots-list")
		if info["tool_count"].(float64) < 14 || info["transport"] != "stdio" || obj(info, "env")["MARKER"] != "(redacted)" || info["protocol_version"] != "2025-11-25" {
			t.Fatalf("MCP server: %v", info)
		}
		if !strings.Contains(s.output(), `"mcp_server":"everything"`) || !strings.Contains(s.output(), "Starting default (STDIO) server") {
			t.Fatalf("the server's stderr is not in the platform's log:\n%s", s.output())
		}
		ga := startGoToolAgent(t, s, "go-tools")
		c := dial(t, s, "alice", "alice-key")

		started := c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@echo", "args": map[string]any{"message": "hi"}})
		runID := sv(started, "run_id")
		res := singleResult(t, c.untilEnd())
		if contentText(res) != "Echo: hi" {
			t.Fatalf("echo: %v", res)
		}
		if fns := agentFunctions(t, s, ga.key, runID); !slices.Contains(fns, "everything--echo") || !slices.Contains(fns, "everything--get-sum") {
			t.Fatalf("functions offered: %v", fns)
		}

		// The OpenAI spelling invokes it too.
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything--get-sum", "args": map[string]any{"a": 2, "b": 3}})
		if res := singleResult(t, c.untilEnd()); contentText(res) != "The sum of 2 and 3 is 5." {
			t.Fatalf("get-sum: %v", res)
		}
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@get-tiny-image", "args": map[string]any{}})
		res = singleResult(t, c.untilEnd())
		var image map[string]any
		for _, b := range res["content"].([]any) {
			if m := b.(map[string]any); m["type"] == "image" {
				image = m
			}
		}
		if image == nil || image["mimeType"] != "image/png" || len(sv(image, "data")) < 1000 {
			t.Fatalf("get-tiny-image: %v", res)
		}

		// A long-running tool: its progress is recorded as it runs.
		started = c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@trigger-long-running-operation", "args": map[string]any{"duration": 1.5, "steps": 3}})
		res = singleResult(t, c.untilEnd())
		if !strings.Contains(contentText(res), "Long running operation completed") {
			t.Fatalf("long-running: %v", res)
		}
		progress := sessionEventsOf(t, s, sv(started, "session_id"), "tool_progress")
		if len(progress) == 0 || num(payload(progress[0]), "total") != 3 || sv(payload(progress[0]), "tool_name") != "everything@trigger-long-running-operation" {
			t.Fatalf("tool_progress events: %v", progress)
		}

		// The server's process is killed during a call: the call fails as
		// one whose outcome is unknown (the tool may have run), the process
		// is started again, and the next call works.
		pids := childPIDs(s.cmd.Process.Pid, in.everything, "stdio")
		if len(pids) != 1 {
			t.Fatalf("server-everything processes of the platform: %v", pids)
		}
		long := c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@trigger-long-running-operation", "args": map[string]any{"duration": 20, "steps": 4}})
		// tool_dispatched is recorded by the claim, just before the request is sent.
		waitUntil(t, "the long call to be sent", func() bool { return len(sessionEventsOf(t, s, sv(long, "session_id"), "tool_dispatched")) == 1 })
		time.Sleep(500 * time.Millisecond)
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if line := singleLine(t, c.untilEnd()); line != "error:outcome_unknown" {
			t.Fatalf("the call in flight when the server died: %q", line)
		}
		waitMCPTools(t, s, "everything", "echo")
		if again := childPIDs(s.cmd.Process.Pid, in.everything, "stdio"); len(again) != 1 || again[0] == pids[0] {
			t.Fatalf("after the kill: %v (was %v)", again, pids)
		}
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@echo", "args": map[string]any{"message": "again"}})
		if res := singleResult(t, c.untilEnd()); contentText(res) != "Echo: again" {
			t.Fatalf("echo after the restart: %v", res)
		}

		// Deleting the server stops its process.
		if code, body := s.call("DELETE", "/v1/mcp_servers/everything", adminKey, nil); code != http.StatusOK {
			t.Fatalf("delete: %d %v", code, body)
		}
		waitUntil(t, "the server's process to end", func() bool { return len(childPIDs(s.cmd.Process.Pid, in.everything)) == 0 })
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@echo", "args": map[string]any{"message": "gone"}})
		if line := singleLine(t, c.untilEnd()); line != "error:tool_not_found" {
			t.Fatalf("a deleted server's tool: %q", line)
		}

		// Registered again, it is stopped with the platform.
		putMCPServer(t, s, "everything", map[string]any{"transport": "stdio", "command": in.node, "args": []any{in.everything, "stdio"}, "env": map[string]any{"MARKER": marker}})
		waitMCPTools(t, s, "everything", "echo")
		if len(processesWithEnv("MARKER="+marker)) != 1 {
			t.Fatalf("server-everything processes: %v", processesWithEnv("MARKER="+marker))
		}
		s.stop()
		if left := processesWithEnv("MARKER=" + marker); len(left) != 0 {
			t.Fatalf("server-everything outlived the platform: %v", left)
		}
		assertSettled(t, dsn)
	})
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// 2. server-everything over Streamable HTTP, registered over the API.

func TestMCPEverythingHTTP(t *testing.T) {
	in := needInterop(t)
	eachStore(t, func(t *testing.T, dsn string) {
		url := in.everythingHTTP(t)
		s := startServer(t, dsn)
		// Refused: an unknown field, and an address the allowlist does not allow.
		if code, body := s.call("PUT", "/v1/mcp_servers/everything", adminKey, map[string]any{"transport": "streamable_http", "url": url, "polcy": map[string]any{}}); code != http.StatusBadRequest {
			t.Fatalf("unknown field: %d %v", code, body)
		}
		if code, body := s.call("PUT", "/v1/mcp_servers/meta", adminKey, map[string]any{"transport": "streamable_http", "url": "http://169.254.169.254/mcp"}); code != http.StatusBadRequest || sv(obj(body, "error"), "code") != "endpoint_not_allowed" {
			t.Fatalf("metadata address: %d %v", code, body)
		}
		if code, _ := s.call("PUT", "/v1/mcp_servers/everything", "alice-key", map[string]any{"transport": "streamable_http", "url": url}); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("a user key registered an MCP server: %d", code)
		}
		body := putMCPServer(t, s, "everything", map[string]any{"transport": "streamable_http", "url": url, "headers": map[string]any{"X-Api-Key": "s3cret"}, "on_failure": "return_to_agent"})
		if obj(body, "headers")["X-Api-Key"] != "(redacted)" {
			t.Fatalf("PUT answered %v", body)
		}
		waitMCPTools(t, s, "everything", "echo", "get-sum", "get-roots-list", "trigger-long-running-operation")
		code, list := s.call("GET", "/v1/mcp_servers", adminKey, nil)
		if code != http.StatusOK || len(list["mcp_servers"].([]any)) != 1 {
			t.Fatalf("list: %d %v", code, list)
		}
		// The admin's tool list shows them with their server.
		code, tools := s.call("GET", "/v1/tools", adminKey, nil)
		found := false
		for _, tl := range tools["tools"].([]any) {
			if m := tl.(map[string]any); m["tool_name"] == "everything@get-sum" && m["kind"] == "mcp" && m["mcp_server"] == "everything" {
				found = true
			}
		}
		if code != http.StatusOK || !found {
			t.Fatalf("admin tool list: %v", tools)
		}

		startGoToolAgent(t, s, "go-tools")
		c := dial(t, s, "alice", "alice-key")
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@echo", "args": map[string]any{"message": "over http"}})
		if res := singleResult(t, c.untilEnd()); contentText(res) != "Echo: over http" {
			t.Fatalf("echo: %v", res)
		}
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@get-sum", "args": map[string]any{"a": 40, "b": 2}})
		if res := singleResult(t, c.untilEnd()); contentText(res) != "The sum of 40 and 2 is 42." {
			t.Fatalf("get-sum: %v", res)
		}
		// Args are checked against the server's schema by the platform.
		c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@get-sum", "args": map[string]any{"a": "x", "b": 2}})
		if line := singleLine(t, c.untilEnd()); line != "error:invalid_args" {
			t.Fatalf("bad args: %q", line)
		}
		started := c.invokeSpec("go-tools", "", map[string]any{"tool": "everything@trigger-long-running-operation", "args": map[string]any{"duration": 1.5, "steps": 3}})
		if res := singleResult(t, c.untilEnd()); !strings.Contains(contentText(res), "Long running operation completed") {
			t.Fatalf("long-running: %v", res)
		}
		if progress := sessionEventsOf(t, s, sv(started, "session_id"), "tool_progress"); len(progress) == 0 {
			t.Fatal("no tool_progress events")
		}
		s.stop()
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 3. Approvals of MCP tools: approved, the tool runs exactly once;
// rejected, never; a restart while one is pending leaves everything
// settled and the tool never run.

func TestMCPToolApproval(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		g := newGoMCPServer(t)
		s := startServer(t, dsn, "--shutdown-grace", "1s")
		putMCPServer(t, s, "calc", map[string]any{"transport": "streamable_http", "url": g.URL, "on_failure": "return_to_agent"})
		waitMCPTools(t, s, "calc", "add", "hold", "refuse")
		// The per-tool override: add needs approval when b is large.
		putTool(t, s, "calc@add", map[string]any{"policy": map[string]any{"decision": "allow", "rules": []any{
			map[string]any{"name": "big", "when": "args.b > 100", "decision": "require_approval"}}}})
		ga := startGoToolAgent(t, s, "go-tools")
		c := dial(t, s, "alice", "alice-key")

		c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 1, "b": 2}})
		if res := singleResult(t, c.untilEnd()); num(obj(res, "structuredContent"), "sum") != 3 {
			t.Fatalf("small add: %v", res)
		}

		// A JSON-RPC error answer is the tool's own failure, with that error
		// as the call's detail (API.md; an external audit found no detail).
		refused := c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@refuse", "args": map[string]any{}})
		c.untilEnd()
		var refusal map[string]any
		for _, e := range s.events("/v1/runs/" + sv(refused, "run_id") + "/events") {
			if e["type"] == "tool_result" {
				refusal = obj(payload(e), "error")
			}
		}
		if detail := obj(refusal, "detail"); refusal["code"] != "tool_error" || num(detail, "code") != -32001 || detail["message"] != "custom rpc failure" || sv(obj(detail, "data"), "why") != "closed" {
			t.Fatalf("a JSON-RPC error's call: %v", refusal)
		}

		started := c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 1, "b": 500}})
		msgs := c.readUntilAll("approval_required", isType("approval_required"), isState("PAUSED_WAITING_APPROVAL"))
		ap := find(t, msgs, "approval_required", isType("approval_required"))
		if sv(ap, "tool_name") != "calc@add" || g.called("add") != 1 {
			t.Fatalf("approval %v; add ran %d times", ap, g.called("add"))
		}
		c.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": started["run_id"], "approval_id": ap["approval_id"], "decision": "approve"})
		if res := singleResult(t, c.untilEnd()); num(obj(res, "structuredContent"), "sum") != 501 {
			t.Fatalf("approved add: %v", res)
		}
		if n := g.called("add"); n != 2 {
			t.Fatalf("add ran %d times, want 2", n)
		}

		started = c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 1, "b": 600}})
		msgs = c.readUntilAll("approval_required", isType("approval_required"))
		ap = find(t, msgs, "approval_required", isType("approval_required"))
		c.send(map[string]any{"type": "approval_decision", "request_id": "d2", "run_id": started["run_id"], "approval_id": ap["approval_id"], "decision": "reject"})
		if line := singleLine(t, c.untilEnd()); line != "error:rejected" {
			t.Fatalf("rejected add: %q", line)
		}
		if n := g.called("add"); n != 2 {
			t.Fatalf("a rejected call ran: add ran %d times", n)
		}

		// The agent cancels its own call while it waits (POST
		// /v1/tool_calls/{id}:cancel): cancelled with its approval, never run.
		started = c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 1, "b": 650}})
		msgs = c.readUntilAll("approval_required", isType("approval_required"))
		ap = find(t, msgs, "approval_required", isType("approval_required"))
		if code, body := s.call("POST", "/v1/tool_calls/"+sv(ap, "tool_call_id")+":cancel", "alice-key", map[string]any{}); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("a user key cancelled a call: %d %v", code, body)
		}
		code, v := s.call("POST", "/v1/tool_calls/"+sv(ap, "tool_call_id")+":cancel", ga.key, map[string]any{"reason": "not needed"})
		if code != http.StatusOK || v["state"] != "CANCELLED" || sv(obj(v, "error"), "message") != "not needed" {
			t.Fatalf("cancel: %d %v", code, v)
		}
		if line := singleLine(t, c.untilEnd()); line != "error:cancelled" {
			t.Fatalf("the cancelled call's invoke: %q", line)
		}
		if a := approvalByID(t, s, "CANCELLED", sv(ap, "approval_id")); a == nil {
			t.Fatal("the cancelled call's approval is not cancelled")
		}
		if code, v := s.call("POST", "/v1/tool_calls/"+sv(ap, "tool_call_id")+":cancel", ga.key, nil); code != http.StatusOK || v["state"] != "CANCELLED" {
			t.Fatalf("second cancel: %d %v", code, v)
		}
		if n := g.called("add"); n != 2 {
			t.Fatalf("a cancelled call ran: add ran %d times", n)
		}

		// Pending when the platform dies: after the restart the run has
		// failed, the approval and the call are cancelled, approving is
		// refused, and the tool never ran.
		started = c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 1, "b": 700}})
		msgs = c.readUntilAll("approval_required", isType("approval_required"))
		ap = find(t, msgs, "approval_required", isType("approval_required"))
		s.kill()
		s.restart()
		run := waitRunEnded(t, s, sv(started, "run_id"))
		if run["status"] != "FAILED" || obj(run, "error")["code"] != "platform_restarted" {
			t.Fatalf("run after the restart: %v", run)
		}
		if v := toolCall(t, s, sv(ap, "tool_call_id")); v["state"] != "CANCELLED" {
			t.Fatalf("call after the restart: %v", v)
		}
		if code, body := decide(s, sv(ap, "approval_id"), "approve"); code != http.StatusConflict {
			t.Fatalf("approving after the restart: %d %v", code, body)
		}
		waitMCPTools(t, s, "calc", "add")
		time.Sleep(200 * time.Millisecond)
		if n := g.called("add"); n != 2 {
			t.Fatalf("add ran %d times after the restart, want 2", n)
		}
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 4. The platform's tools over MCP: the go-sdk client and the npm client.

// mcpHeaders adds an agent's key and run to every request.
type mcpHeaders struct {
	key, runID string
}

func (h mcpHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.key)
	r.Header.Set("x-run-id", h.runID)
	return http.DefaultTransport.RoundTrip(r)
}

// progressLog records the progress notifications a client got.
type progressLog struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progressLog) add(m string) { p.mu.Lock(); p.msgs = append(p.msgs, m); p.mu.Unlock() }
func (p *progressLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

func connectMCP(t *testing.T, s *server, key, runID string, progress *progressLog) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				progress.add(r.Params.Message)
			}
		},
	})
	cs, err := client.Connect(ctxTimeout(t, 30*time.Second), &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp", HTTPClient: &http.Client{Transport: mcpHeaders{key, runID}}}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestMCPServerEndpoint(t *testing.T) {
	in := needInterop(t)
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		g := newGoMCPServer(t)
		putTool(t, s, "srv.echo", map[string]any{"kind": "server", "description": "Echoes its args.", "endpoint": te.URL,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}}, "on_failure": "return_to_agent"})
		putTool(t, s, "pay.transfer", transferTool(te.URL, "return_to_agent", alwaysApproval))
		putMCPServer(t, s, "calc", map[string]any{"transport": "streamable_http", "url": g.URL})
		waitMCPTools(t, s, "calc", "add")
		ga := startGoToolAgent(t, s, "go-tools")
		other := startGoToolAgent(t, s, "other-agent")
		c := dial(t, s, "alice", "alice-key")
		started := c.invokeSpec("go-tools", "", map[string]any{"hold": true})
		runID := ga.held(t)
		if runID != sv(started, "run_id") {
			t.Fatalf("held run %s, started %s", runID, started["run_id"])
		}

		// Refusals come before MCP: a bad key, no run, another agent's run.
		for _, tc := range []struct {
			key, run string
			want     int
		}{{"nope", runID, 401}, {ga.key, "", 400}, {other.key, runID, 403}, {adminKey, runID, 403}} {
			code, body, err := httpJSON("POST", s.URL+"/mcp", tc.key, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
				"params": map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "x", "version": "1"}}},
				"x-run-id", tc.run, "Accept", "application/json, text/event-stream")
			if err != nil || code != tc.want || sv(obj(body, "error"), "code") == "" {
				t.Errorf("key %q run %q: %d %v %v, want %d with a structured error", tc.key, tc.run, code, body, err, tc.want)
			}
		}

		// The go-sdk client.
		progress := &progressLog{}
		cs := connectMCP(t, s, ga.key, runID, progress)
		lt, err := cs.ListTools(ctxTimeout(t, 30*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range lt.Tools {
			names = append(names, tl.Name)
			if tl.Name == "calc--add" && (tl.Title != "calc@add" || tl.InputSchema == nil) {
				t.Errorf("calc--add listed as %+v", tl)
			}
		}
		want := []string{"calc--add", "calc--hold", "pay__transfer", "srv__echo"}
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Fatalf("tools/list %v lacks %s", names, w)
			}
		}
		if fns := agentFunctions(t, s, ga.key, runID); !slices.Equal(sortedCopy(fns), sortedCopy(names)) {
			t.Fatalf("tools/list %v differs from GET /v1/tools?run_id= %v", names, fns)
		}

		res, err := cs.CallTool(ctxTimeout(t, 30*time.Second), &mcp.CallToolParams{Name: "srv__echo", Arguments: map[string]any{"x": 7}})
		if err != nil || res.IsError {
			t.Fatalf("srv__echo: %+v %v", res, err)
		}
		if sc, _ := res.StructuredContent.(map[string]any); num(obj(sc, "args"), "x") != 7 || res.Meta["agentplane/tool_call_id"] == nil {
			t.Fatalf("srv__echo result: %+v", res)
		}
		res, err = cs.CallTool(ctxTimeout(t, 30*time.Second), &mcp.CallToolParams{Name: "calc@add", Arguments: map[string]any{"a": 2, "b": 2}})
		if err != nil || res.IsError || num(res.StructuredContent.(map[string]any), "sum") != 4 {
			t.Fatalf("calc@add: %+v %v", res, err)
		}
		// Bad args: an isError result the model can read.
		res, err = cs.CallTool(ctxTimeout(t, 30*time.Second), &mcp.CallToolParams{Name: "calc--add", Arguments: map[string]any{"a": "x"}})
		if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "invalid_args") {
			t.Fatalf("bad args: %+v %v", res, err)
		}
		if _, err := cs.CallTool(ctxTimeout(t, 30*time.Second), &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
			t.Fatal("an unknown tool answered")
		}

		// Needing approval: progress while it waits, the WebSocket client approves.
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay__transfer", Arguments: map[string]any{"amount": 5, "to": "bob"}, Meta: mcp.Meta{"progressToken": "p1"}})
			if err != nil {
				t.Errorf("pay__transfer: %v", err)
			}
			done <- res
		}()
		msgs := c.readUntilAll("approval_required", isType("approval_required"))
		ap := find(t, msgs, "approval_required", isType("approval_required"))
		waitUntil(t, "a progress notification", func() bool { return len(progress.all()) > 0 })
		if p := progress.all(); !strings.Contains(p[0], "approval") {
			t.Fatalf("progress %v", p)
		}
		c.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve"})
		select {
		case res := <-done:
			if res == nil || res.IsError || res.Meta["agentplane/tool_call_id"] != ap["tool_call_id"] {
				t.Fatalf("approved transfer: %+v", res)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the approved call never answered")
		}

		// Cancelled by the client while it waits: the tool call is cancelled.
		cctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "pay__transfer", Arguments: map[string]any{"amount": 6, "to": "bob"}})
			errc <- err
		}()
		msgs = c.readUntilAll("approval_required", isType("approval_required"))
		ap = find(t, msgs, "approval_required", isType("approval_required"))
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
		waitUntil(t, "the tool call to be cancelled", func() bool { return toolCall(t, s, sv(ap, "tool_call_id"))["state"] == "CANCELLED" })
		if a := approvalByID(t, s, "CANCELLED", sv(ap, "approval_id")); a == nil {
			t.Fatal("the approval of the cancelled call is not cancelled")
		}

		// The session is the run's: another run's x-run-id on it is refused.
		c2 := dial(t, s, "alice", "alice-key")
		c2.invokeSpec("go-tools", "", map[string]any{"hold": true})
		run2 := ga.held(t)
		code, _, err := httpJSON("POST", s.URL+"/mcp", ga.key, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
			"x-run-id", run2, "Mcp-Session-Id", cs.ID(), "Mcp-Protocol-Version", "2025-11-25", "Accept", "application/json, text/event-stream", "Content-Type", "application/json")
		if code != http.StatusForbidden {
			t.Fatalf("the session with another run: %d %v", code, err)
		}

		// A call waiting for approval ends when its run does (cancelled by
		// the user here): the MCP request answers, it does not hang.
		cs2 := connectMCP(t, s, ga.key, run2, nil)
		ended := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs2.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay__transfer", Arguments: map[string]any{"amount": 8, "to": "dan"}})
			if err != nil {
				t.Errorf("the call of the cancelled run: %v", err)
			}
			ended <- res
		}()
		c2.readUntilAll("approval_required", isType("approval_required"))
		c2.send(map[string]any{"type": "cancel_run", "request_id": "c1", "run_id": run2})
		select {
		case res := <-ended:
			if res == nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"code":"cancelled"`) {
				t.Fatalf("the call of the cancelled run answered %+v", res)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the call of the cancelled run never answered")
		}

		// The npm client, as a second agent tool client of the same run.
		before := te.count()
		cmd := exec.Command(in.node, filepath.Join(in.dir, "mcp_client.mjs"))
		cmd.Dir = in.dir
		cmd.Env = append(os.Environ(), "MCP_URL="+s.URL+"/mcp", "MCP_KEY="+ga.key, "MCP_RUN_ID="+runID,
			"MCP_ALLOWED_TOOL=srv__echo", `MCP_ALLOWED_ARGS={"x":9}`,
			"MCP_APPROVAL_TOOL=pay.transfer", `MCP_APPROVAL_ARGS={"amount":7,"to":"carol"}`)
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan map[string]any, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var m map[string]any
				if json.Unmarshal(sc.Bytes(), &m) == nil {
					lines <- m
				}
			}
			close(lines)
		}()
		// The first approval is approved, the second left for the script to cancel.
		msgs = c.readUntilAll("the npm client's approval", isType("approval_required"))
		ap = find(t, msgs, "approval_required", isType("approval_required"))
		c.send(map[string]any{"type": "approval_decision", "request_id": "d2", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve"})
		msgs = c.readUntilAll("the npm client's second approval", isType("approval_required"))
		cancelled := find(t, msgs, "approval_required", isType("approval_required"))
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mcp_client.mjs: %v\n%s", err, stderr.String())
		}
		steps := map[string]map[string]any{}
		for m := range lines {
			steps[sv(m, "step")] = m
		}
		t.Logf("npm client: %v", steps)
		if !slices.Contains(anyStrings(steps["tools"]["names"]), "calc--add") || !slices.Contains(anyStrings(steps["tools"]["titles"]), "calc@add") {
			t.Fatalf("npm tools: %v", steps["tools"])
		}
		if a := steps["allowed"]; a["isError"] != false || num(obj(obj(a, "structured"), "args"), "x") != 9 {
			t.Fatalf("npm allowed call: %v", a)
		}
		if a := steps["approved"]; a["isError"] != false || len(anyStrings(a["progress"])) == 0 {
			t.Fatalf("npm approved call: %v", a)
		}
		if cl := steps["cancelled"]; sv(cl, "error") == "" || steps["closed"] == nil {
			t.Fatalf("npm cancelled call: %v", steps)
		}
		waitUntil(t, "the npm client's cancelled call", func() bool { return toolCall(t, s, sv(cancelled, "tool_call_id"))["state"] == "CANCELLED" })
		if n := te.count() - before; n != 2 {
			t.Fatalf("the server tool ran %d times for the npm client, want 2 (allowed + approved)", n)
		}

		ga.releaseAll()
		waitRunEnded(t, s, runID)
		waitRunEnded(t, s, run2)
		assertSettled(t, dsn)
	})
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func anyStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// 5. Replicas: each connects to every MCP server; a call dispatched by an
// approval decided on another replica runs there, once.

func TestMCPAcrossReplicas(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "replica-a")
	b := startServer(t, dsn, "--instance-id", "replica-b")
	g := newGoMCPServer(t)
	putMCPServer(t, a, "calc", map[string]any{"transport": "streamable_http", "url": g.URL, "policy": map[string]any{"decision": "require_approval"}, "on_failure": "return_to_agent"})
	waitMCPTools(t, a, "calc", "add")
	waitMCPTools(t, b, "calc", "add") // B read the registry and connected itself

	startGoToolAgent(t, a, "go-tools") // its tool calls go to A
	c := dial(t, a, "alice", "alice-key")
	c.invokeSpec("go-tools", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 20, "b": 22}})
	msgs := c.readUntilAll("approval_required", isType("approval_required"))
	ap := find(t, msgs, "approval_required", isType("approval_required"))
	code, body := b.call("POST", "/v1/approvals/"+sv(ap, "approval_id")+":decide", adminKey, map[string]any{"decision": "approve"})
	if code != http.StatusOK {
		t.Fatalf("approve on B: %d %v", code, body)
	}
	if res := singleResult(t, c.untilEnd()); num(obj(res, "structuredContent"), "sum") != 42 {
		t.Fatalf("add approved on B: %v", res)
	}
	if n := g.called("add"); n != 1 {
		t.Fatalf("add ran %d times", n)
	}

	// Deleted through A: B lets go of it too.
	if code, body := a.call("DELETE", "/v1/mcp_servers/calc", adminKey, nil); code != http.StatusOK {
		t.Fatalf("delete: %d %v", code, body)
	}
	waitUntil(t, "B to forget the server", func() bool {
		code, tools := b.call("GET", "/v1/tools", adminKey, nil)
		if code != http.StatusOK {
			return false
		}
		for _, tl := range tools["tools"].([]any) {
			if tl.(map[string]any)["mcp_server"] == "calc" {
				return false
			}
		}
		return true
	})
	assertSettled(t, dsn)
}
