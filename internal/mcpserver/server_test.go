package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/mcpserver"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

const agentKey = "agent-a-key-0123456789"

// logBuffer collects JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// endpoint is /mcp of a real tool service over a real store, served by a
// real HTTP server, for agent "agent-a" (key agentKey) and two of its
// runs. Its one tool, srv.slow, is a server tool that answers once
// released.
type endpoint struct {
	url        string
	run1, run2 *store.Run
	logs       *logBuffer
	release    chan struct{}
	svc        *toolsvc.Service
}

func newEndpoint(t *testing.T) *endpoint {
	t.Helper()
	ctx := context.Background()
	e := &endpoint{logs: &logBuffer{}, release: make(chan struct{})}
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st := testdb.Open(t, "sqlite")
	log := eventlog.New(st, eventlog.Options{Origin: "test"})
	svc := toolsvc.New(log, toolsvc.Options{SweepInterval: time.Hour, InlineWait: 5 * time.Second, Logger: logger})
	runs := run.New(log, run.Options{InstanceID: "test", Invoker: &agent.Client{}, OnEnd: svc.OnRunEnd, HeartbeatInterval: time.Hour})
	svc.SetRuns(runs)
	e.svc = svc
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	toolSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-e.release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"slept":true}`)
	}))
	mcps := mcpserver.New(mcpserver.Options{Keys: auth.New("admin-key-0123456789", nil, st), Tools: svc, Logger: logger, ProgressInterval: 50 * time.Millisecond})
	mux := http.NewServeMux()
	mcps.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(e.release)
		mcps.Stop()
		srv.Close()
		toolSrv.Close()
		runs.Shutdown(context.Background())
		svc.Stop()
		log.Stop()
	})
	e.url = srv.URL + "/mcp"

	now := time.Now().UnixMilli()
	if _, err := st.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "agent-a", Name: "A", Endpoint: "http://127.0.0.1:1", KeyHash: auth.HashKey(agentKey), At: now}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutTool(ctx, tool.Definition{Name: "srv.slow", Kind: tool.KindServer, Endpoint: toolSrv.URL, Description: "Answers once released.",
		Parameters: json.RawMessage(`{"type":"object"}`)}); err != nil {
		t.Fatal(err)
	}
	newRun := func() *store.Run {
		sid := ids.New("ses")
		if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "alice", CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "agent-a", UserID: "alice", Owner: "test", StartedAt: now, IntentionID: ids.New("int")})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	e.run1, e.run2 = newRun(), newRun()
	return e
}

// runHeaders adds the agent's key and a run's x-run-id to every request.
type runHeaders struct{ runID string }

func (h runHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+agentKey)
	r.Header.Set("x-run-id", h.runID)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session for runID with the go-sdk client.
func (e *endpoint) connect(t *testing.T, runID string, progress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				progress(r.Params)
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: &http.Client{Transport: runHeaders{runID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// post sends body to /mcp as runID, on session sessionID if not empty.
func (e *endpoint) post(t *testing.T, runID, sessionID, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+agentKey)
	req.Header.Set("x-run-id", runID)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// The refusals the MCP SDK makes itself — a session used with another
// run's x-run-id, an unknown session, a body that is not JSON — are the
// platform's {"error":{"code","message"}} like every other HTTP refusal
// (DESIGN §2.7).
func TestRefusalsAreStructured(t *testing.T) {
	e := newEndpoint(t)
	cs := e.connect(t, e.run1.RunID, nil)
	const list = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	for _, tc := range []struct {
		what, runID, session, body string
		status                     int
		code                       string
	}{
		{"the session with another run", e.run2.RunID, cs.ID(), list, http.StatusForbidden, "forbidden"},
		{"an unknown session", e.run1.RunID, "no-such-session", list, http.StatusNotFound, "session_not_found"},
		{"a body that is not JSON", e.run1.RunID, cs.ID(), `{"jsonrpc":`, http.StatusBadRequest, "invalid_json"},
		{"a request that is not JSON-RPC", e.run1.RunID, cs.ID(), `{"jsonrpc":"2.0","id":8,"method":"no/such/method"}`, http.StatusBadRequest, "invalid_request"},
	} {
		status, h, body := e.post(t, tc.runID, tc.session, tc.body)
		var got struct {
			Error struct{ Code, Message string }
		}
		if status != tc.status || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal(body, &got) != nil ||
			got.Error.Code != tc.code || got.Error.Message == "" {
			t.Errorf("%s: %d %s %q, want %d with error code %s", tc.what, status, h.Get("Content-Type"), body, tc.status, tc.code)
		}
	}
	// The session is still the run's, and usable.
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("tools/list after the refusals: %v", err)
	}
}

// JSON-RPC answers and event streams pass through as the SDK writes them:
// an error status with a JSON-RPC body stays JSON-RPC, and a pending
// tools/call's progress notifications arrive while it waits (its stream
// is flushed), then its result.
func TestStreamsPassThrough(t *testing.T) {
	e := newEndpoint(t)
	progress := make(chan string, 100)
	cs := e.connect(t, e.run1.RunID, func(p *mcp.ProgressNotificationParams) { progress <- p.Message })

	// A protocol version this stateful server does not take: its JSON-RPC
	// error, untouched.
	req, _ := http.NewRequest("POST", e.url, strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`))
	for k, v := range map[string]string{"Authorization": "Bearer " + agentKey, "x-run-id": e.run1.RunID, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2026-07-28", "Mcp-Session-Id": cs.ID()} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rpc struct {
		JSONRPC string `json:"jsonrpc"`
		Error   *struct{ Code int }
	}
	if resp.StatusCode < 400 || json.Unmarshal(body, &rpc) != nil || rpc.JSONRPC != "2.0" || rpc.Error == nil || rpc.Error.Code == 0 {
		t.Errorf("a JSON-RPC error answer: %d %q", resp.StatusCode, body)
	}

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "srv__slow", Arguments: map[string]any{}, Meta: mcp.Meta{"progressToken": "p1"}})
		done <- answer{res, err}
	}()
	// The tool answers only once progress has come: nothing buffered it.
	select {
	case msg := <-progress:
		if !strings.Contains(msg, "running") {
			t.Errorf("progress while the call runs: %q", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no progress notification while the call ran")
	}
	e.release <- struct{}{}
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("srv__slow: %+v %v", a.res, a.err)
	}
	if sc, _ := a.res.StructuredContent.(map[string]any); sc["slept"] != true {
		t.Fatalf("srv__slow result: %+v", a.res)
	}
}

// The SDK's own log lines carry the MCP session's id as mcp.session_id:
// session_id is the platform's ses_… alone (DESIGN §14).
func TestSDKLogsAreGrouped(t *testing.T) {
	e := newEndpoint(t)
	cs := e.connect(t, e.run1.RunID, nil)
	var connected map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for connected == nil && time.Now().Before(deadline) {
		for _, l := range e.logs.lines() {
			if l["msg"] == "server session connected" {
				connected = l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if connected == nil {
		t.Fatalf("no session connected line in\n%v", e.logs.lines())
	}
	group, _ := connected["mcp"].(map[string]any)
	if _, top := connected["session_id"]; top || group["session_id"] != cs.ID() {
		t.Fatalf("the SDK's line %v: want mcp.session_id %s and no session_id", connected, cs.ID())
	}
}
