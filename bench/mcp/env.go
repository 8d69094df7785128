package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

const (
	adminKey = benchproc.AdminKey
	agentID  = "bench-mcp-agent"
	// mcpTool is the MCP server's tool as agentplane names it.
	mcpTool    = "bench@echo"
	nativeTool = "bench.echo"
)

// --- the tools: one MCP server, one plain HTTP tool, both answering at once ---

type echoIn struct {
	N    int    `json:"n"`
	Note string `json:"note"`
}

// tools serves the MCP server (Streamable HTTP, go-sdk) and the native
// server tool's endpoint, counting the calls each gets.
type tools struct {
	mcpURL, httpURL string
	mcpCalls        atomic.Int64
	httpCalls       atomic.Int64
	srv             *http.Server

	// What the servers see on the wire (wire()).
	mcpRequests atomic.Int64 // every request to the MCP endpoint
	conns       atomic.Int64 // TCP connections accepted, from every caller
	mu          sync.Mutex
	postConns   map[string]map[string]bool // MCP session → the remote addresses its POSTs came from
}

// wireCount is what the servers saw up to a moment.
type wireCount struct {
	mcpRequests, conns int64
	// sessionConns counts, per MCP session, the connections its POSTs came on.
	sessionConns map[string]int
}

func (t *tools) wire() wireCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := wireCount{mcpRequests: t.mcpRequests.Load(), conns: t.conns.Load(), sessionConns: map[string]int{}}
	for s, addrs := range t.postConns {
		w.sessionConns[s] = len(addrs)
	}
	return w
}

// startTools starts the tool servers; jsonResponse makes the MCP server
// answer a tools/call with an application/json body instead of an event
// stream (StreamableHTTPOptions.JSONResponse).
func startTools(jsonResponse bool) (*tools, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &tools{postConns: map[string]map[string]bool{}, mcpURL: "http://" + ln.Addr().String() + "/mcp", httpURL: "http://" + ln.Addr().String() + "/tool"}
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes its args"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, map[string]any, error) {
		t.mcpCalls.Add(1)
		return nil, map[string]any{"ok": true, "echo": in}, nil
	})
	mux := http.NewServeMux()
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		t.mcpRequests.Add(1)
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" && r.Method == http.MethodPost {
			t.mu.Lock()
			if t.postConns[sid] == nil {
				t.postConns[sid] = map[string]bool{}
			}
			t.postConns[sid][r.RemoteAddr] = true
			t.mu.Unlock()
		}
		mcpHandler.ServeHTTP(w, r)
	})
	mux.HandleFunc("POST /tool", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Args json.RawMessage `json:"args"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		t.httpCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"ok": true, "echo": body.Args})
		w.Write(b)
	})
	t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			t.conns.Add(1)
		}
	}}
	go t.srv.Serve(ln)
	return t, nil
}

func (t *tools) close() { t.srv.Close() }

// --- HTTP ---

func newClient(maxIdle int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxIdle,
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

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
		return fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

type callView struct {
	Status string `json:"status"`
	State  string `json:"state"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// --- the platform ---

// platform is one `agentplane serve` on one store with the bench agent,
// the tools registered (the MCP server connected), a client and live runs.
type platform struct {
	store    string
	p        *benchproc.Proc
	agentKey string
	agent    *benchproc.HoldAgent
	tools    *tools
	http     *http.Client
	ws       *websocket.Conn
	runIDs   []string
	cleanup  []func()
}

func startPlatformEnv(store, bin, dir, pg string, runs int, t *tools) (_ *platform, err error) {
	e := &platform{store: store, tools: t}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	var dsn string
	switch store {
	case "sqlite":
		dsn = "sqlite:" + filepath.Join(dir, fmt.Sprintf("bench-%d.db", time.Now().UnixNano()))
	case "postgres":
		var drop func()
		if dsn, drop, err = benchproc.PostgresSchema(pg); err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, drop)
	default:
		return nil, fmt.Errorf("unknown store %q", store)
	}
	if e.agent, err = benchproc.StartHoldAgent(); err != nil {
		return nil, err
	}
	if e.p, err = benchproc.StartPlatform(bin, dsn, nil, nil); err != nil {
		return nil, err
	}
	e.http = newClient(256)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var reg struct {
		AgentAPIKey string `json:"agent_api_key"`
	}
	if err = do(ctx, e.http, "POST", e.p.URL+"/v1/agents/register", adminKey,
		map[string]any{"agent_id": agentID, "name": "MCP bench agent", "endpoint": e.agent.URL, "capabilities": []string{"chat"}}, &reg); err != nil {
		return nil, fmt.Errorf("register agent: %w", err)
	}
	e.agentKey = reg.AgentAPIKey
	params := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}, "note": map[string]any{"type": "string"}}}
	if err = do(ctx, e.http, "PUT", e.p.URL+"/v1/tools/"+nativeTool, adminKey, map[string]any{"kind": "server", "description": "echoes its args",
		"parameters": params, "endpoint": t.httpURL, "policy": map[string]any{"decision": "allow"}}, nil); err != nil {
		return nil, fmt.Errorf("register tool: %w", err)
	}
	if err = do(ctx, e.http, "PUT", e.p.URL+"/v1/mcp_servers/bench", adminKey, map[string]any{"transport": "streamable_http", "url": t.mcpURL,
		"policy": map[string]any{"decision": "allow"}}, nil); err != nil {
		return nil, fmt.Errorf("register MCP server: %w", err)
	}
	for {
		var info struct {
			Status string   `json:"status"`
			Tools  []string `json:"tools"`
		}
		if err = do(ctx, e.http, "GET", e.p.URL+"/v1/mcp_servers/bench", adminKey, nil, &info); err != nil {
			return nil, err
		}
		if info.Status == "connected" && slices.Contains(info.Tools, "echo") {
			break
		}
		if ctx.Err() != nil {
			return nil, errors.New("the MCP server did not connect in 60 s:\n" + e.p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}

	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	if e.ws, _, err = d.Dial(e.p.WSURL("/v1/ws"), nil); err != nil {
		return nil, fmt.Errorf("client websocket: %w", err)
	}
	e.ws.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey})
	var ready struct {
		Type string `json:"type"`
	}
	if err = e.ws.ReadJSON(&ready); err != nil || ready.Type != "ready" {
		return nil, fmt.Errorf("hello answered %q (%v)", ready.Type, err)
	}
	go func() {
		for {
			if _, _, err := e.ws.ReadMessage(); err != nil {
				return
			}
		}
	}()
	for i := range runs {
		if err = e.ws.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": "r" + strconv.Itoa(i), "agent_id": agentID,
			"message": map[string]any{"role": "user", "content": "hold this run open"}}); err != nil {
			return nil, err
		}
	}
	timeout := time.After(60 * time.Second)
	for len(e.runIDs) < runs {
		select {
		case id := <-e.agent.Runs:
			e.runIDs = append(e.runIDs, id)
		case <-timeout:
			return nil, fmt.Errorf("only %d of %d runs reached the agent:\n%s", len(e.runIDs), runs, e.p.Tail())
		}
	}
	return e, nil
}

// invoke calls a tool as the agent, in run.
func (e *platform) invoke(ctx context.Context, tool, runID string, args any) (*callView, error) {
	var v callView
	err := do(ctx, e.http, "POST", e.p.URL+"/v1/tools/"+tool+":invoke", e.agentKey, map[string]any{"run_id": runID, "args": args}, &v)
	return &v, err
}

func (e *platform) close() {
	if e.agent != nil {
		e.agent.Finish()
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
	for _, fn := range e.cleanup {
		fn()
	}
}
