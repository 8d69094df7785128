package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

// --- the fast server tool ---

// toolServer is a server tool's endpoint: it answers every POST at once
// with a small JSON result. It counts requests so a run can check that
// every call reached it exactly as often as expected.
type toolServer struct {
	srv   *http.Server
	URL   string // the endpoint
	calls atomic.Int64
}

func startToolServer() (*toolServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &toolServer{URL: "http://" + ln.Addr().String() + "/tool"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tool", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ToolCallID string          `json:"tool_call_id"`
			Args       json.RawMessage `json:"args"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		t.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"ok": true, "echo": body.Args})
		w.Write(b)
	})
	t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go t.srv.Serve(ln)
	return t, nil
}

func (t *toolServer) close() { t.srv.Close() }

// --- HTTP client ---

// newClient is the bench's HTTP client: keep-alive, a pool big enough that
// no request waits for a connection.
func newClient(maxIdle int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxIdle,
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// apiError is a non-2xx answer.
type apiError struct {
	Status int
	Body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// do sends a JSON request and decodes a 2xx JSON answer into out.
func do(ctx context.Context, c *http.Client, method, url, key string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{resp.StatusCode, string(raw)}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// callView is the part of the tool-call view the bench reads.
type callView struct {
	ToolCallID string `json:"tool_call_id"`
	Status     string `json:"status"`
	State      string `json:"state"`
	ApprovalID string `json:"approval_id"`
	Error      *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func (v *callView) code() string {
	if v.Error == nil {
		return ""
	}
	return v.Error.Code
}

// --- the platform with its fixtures ---

// platform is one `agentplane serve` process on one store, with the bench
// agent registered, a tool server, a client connected and live runs.
type platform struct {
	store    string // sqlite | postgres
	dsn      string
	p        *proc
	agentKey string
	agent    *benchproc.HoldAgent
	tools    *toolServer
	ws       *websocket.Conn
	http     *http.Client
	runIDs   []string
	cleanup  []func()
	gc       *gcTracker
	wsMsgs   atomic.Int64
	wsClosed chan struct{}
	pprof    string // where the platform serves net/http/pprof ("" = not)
}

// platformOptions configure startPlatformEnv.
type platformOptions struct {
	store    string // sqlite | postgres
	bin, dir string
	pg       string // PostgreSQL base URL
	runs     int    // live runs to start
	gctrace  bool
	maxIdle  int
	logFile  string
	pprof    string // the platform's --pprof-addr (AGENTPLANE_PPROF_ADDR); "" = off
}

// startPlatformEnv starts the binary on a fresh store, registers the agent
// and the tools, connects a client and starts opts.runs runs (each in a
// session of its own), and returns when the agent holds all of them open.
func startPlatformEnv(o platformOptions) (_ *platform, err error) {
	e := &platform{store: o.store, wsClosed: make(chan struct{})}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	var dsn string
	switch o.store {
	case "sqlite":
		dsn = "sqlite:" + filepath.Join(o.dir, fmt.Sprintf("bench-%d.db", time.Now().UnixNano()))
	case "postgres":
		var drop func()
		if dsn, drop, err = postgresSchema(o.pg); err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, drop)
	default:
		return nil, fmt.Errorf("unknown store %q", o.store)
	}
	var env []string
	if o.pprof != "" {
		env = append(env, "AGENTPLANE_PPROF_ADDR="+o.pprof)
		e.pprof = o.pprof
	}
	var sinks []func(string)
	if o.gctrace {
		e.gc = &gcTracker{}
		env = append(env, "GODEBUG=gctrace=1")
		sinks = append(sinks, e.gc.line)
	}
	if o.logFile != "" {
		if f, ferr := os.OpenFile(o.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
			var mu sync.Mutex
			tag := o.store
			sinks = append(sinks, func(s string) { mu.Lock(); fmt.Fprintf(f, "[%s] %s\n", tag, s); mu.Unlock() })
			e.cleanup = append(e.cleanup, func() { f.Close() })
		}
	}
	onStderr := func(s string) {
		for _, fn := range sinks {
			fn(s)
		}
	}
	if e.agent, err = benchproc.StartHoldAgent(); err != nil {
		return nil, err
	}
	if e.tools, err = startToolServer(); err != nil {
		return nil, err
	}
	e.dsn = dsn
	if e.p, err = startPlatform(o.bin, dsn, env, onStderr); err != nil {
		return nil, err
	}
	if o.maxIdle <= 0 {
		o.maxIdle = 1024
	}
	e.http = newClient(o.maxIdle)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var reg struct {
		AgentAPIKey string `json:"agent_api_key"`
	}
	if err = do(ctx, e.http, "POST", e.p.URL+"/v1/agents/register", adminKey,
		map[string]any{"agent_id": agentID, "name": "tools bench agent", "endpoint": e.agent.URL, "capabilities": []string{"chat"}}, &reg); err != nil {
		return nil, fmt.Errorf("register agent: %w", err)
	}
	if reg.AgentAPIKey == "" {
		return nil, errors.New("register agent: no agent_api_key in the answer")
	}
	e.agentKey = reg.AgentAPIKey
	for name, def := range benchTools(e.tools.URL) {
		if err = do(ctx, e.http, "PUT", e.p.URL+"/v1/tools/"+name, adminKey, def, nil); err != nil {
			return nil, fmt.Errorf("register tool %s: %w", name, err)
		}
	}

	// The user's client: one WebSocket, one agent_invoke per run (each a
	// new session); it reads and discards everything the platform sends.
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	if e.ws, _, err = d.Dial(e.p.WSURL("/v1/ws"), nil); err != nil {
		return nil, fmt.Errorf("client websocket: %w", err)
	}
	e.ws.WriteJSON(map[string]any{"type": "hello", "user_id": userID, "api_key": userKey})
	var ready struct {
		Type string `json:"type"`
	}
	if err = e.ws.ReadJSON(&ready); err != nil || ready.Type != "ready" {
		return nil, fmt.Errorf("hello answered %q (%v)", ready.Type, err)
	}
	go func() {
		defer close(e.wsClosed)
		for {
			if _, _, err := e.ws.ReadMessage(); err != nil {
				return
			}
			e.wsMsgs.Add(1)
		}
	}()
	for i := range o.runs {
		if err = e.ws.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": fmt.Sprintf("r%d", i), "agent_id": agentID,
			"message": map[string]any{"role": "user", "content": "hold this run open"}}); err != nil {
			return nil, err
		}
	}
	timeout := time.After(60 * time.Second)
	for len(e.runIDs) < o.runs {
		select {
		case id := <-e.agent.Runs:
			e.runIDs = append(e.runIDs, id)
		case <-timeout:
			return nil, fmt.Errorf("only %d of %d runs reached the agent in 60 s:\n%s", len(e.runIDs), o.runs, e.p.Tail())
		}
	}
	return e, nil
}

// benchTools are the tools every mode registers.
func benchTools(endpoint string) map[string]any {
	params := map[string]any{"type": "object", "properties": map[string]any{
		"n": map[string]any{"type": "integer"}, "note": map[string]any{"type": "string"},
	}}
	return map[string]any{
		// An allowed fast server tool: invoke answers succeeded directly.
		"bench.echo": map[string]any{"kind": "server", "description": "echoes its args", "parameters": params,
			"endpoint": endpoint, "policy": map[string]any{"decision": "allow"}},
		// The same tool behind a human approval. A rejection returns to the
		// agent (on_failure return_to_agent) so the run survives it and
		// can be used again; approval_timeout_ms is long so nothing
		// expires during a run.
		"bench.approve": map[string]any{"kind": "server", "description": "echoes its args after approval", "parameters": params,
			"endpoint": endpoint, "policy": map[string]any{"decision": "require_approval"},
			"on_failure": "return_to_agent", "approval_timeout_ms": 3_600_000},
	}
}

// invoke calls a tool as the agent, in run.
func (e *platform) invoke(ctx context.Context, tool, runID string, args any) (*callView, error) {
	var v callView
	err := do(ctx, e.http, "POST", e.p.URL+"/v1/tools/"+tool+":invoke", e.agentKey, map[string]any{"run_id": runID, "args": args}, &v)
	return &v, err
}

// wait long-polls a tool call as the agent.
func (e *platform) wait(ctx context.Context, id string, timeout time.Duration) (*callView, error) {
	var v callView
	err := do(ctx, e.http, "POST", fmt.Sprintf("%s/v1/tool_calls/%s:wait?timeout_ms=%d", e.p.URL, id, timeout.Milliseconds()), e.agentKey, nil, &v)
	return &v, err
}

// decide approves or rejects as the admin.
func (e *platform) decide(ctx context.Context, approvalID, decision string) error {
	return do(ctx, e.http, "POST", e.p.URL+"/v1/approvals/"+approvalID+":decide", adminKey,
		map[string]any{"decision": decision, "reason": "bench", "decided_by": "bench"}, nil)
}

// waitsPending is the platform's own count of long-polls it holds.
func (e *platform) waitsPending() float64 {
	m := scrapeMetrics(e.p.URL)
	if m == nil {
		return -1
	}
	return m["agentplane_tool_waits_pending"]
}

// pkLookups is how many index scans PostgreSQL has counted on tool_calls'
// primary key (each a read or guarded update of one call by id), -1 on
// SQLite. The statistics are flushed by the server's backends within about
// a second of their transactions, so read it after a pause.
func (e *platform) pkLookups() int64 {
	if e.store != "postgres" {
		return -1
	}
	db, err := sql.Open("pgx", e.dsn)
	if err != nil {
		return -1
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(`SELECT idx_scan FROM pg_stat_user_indexes WHERE schemaname = current_schema() AND indexrelname = 'tool_calls_pkey'`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// close ends the runs (the agent sends done), stops the platform and
// removes its store.
func (e *platform) close() {
	if e.agent != nil {
		e.agent.Finish() // waits (≤ 5 s) until every held run has sent done
	}
	if e.ws != nil {
		e.ws.Close()
	}
	if e.p != nil {
		e.p.Stop(30 * time.Second)
	}
	if e.agent != nil {
		e.agent.Close()
	}
	if e.tools != nil {
		e.tools.close()
	}
	for _, fn := range e.cleanup {
		fn()
	}
}

// profile records CPU profiles of the platform (when it serves pprof)
// until stop: consecutive 1 s profiles file.000, file.001 … (the handler
// cannot be stopped early), merged with go tool pprof -proto file.* .
func (e *platform) profile(file string) (stop func()) {
	if e.pprof == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var n int
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+e.pprof+"/debug/pprof/profile?seconds=1", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			f, err := os.Create(fmt.Sprintf("%s.%03d", file, n))
			if err == nil {
				io.Copy(f, resp.Body)
				f.Close()
			}
			resp.Body.Close()
			n++
		}
	}()
	return func() { cancel(); <-done }
}
