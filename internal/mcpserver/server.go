// Package mcpserver serves the platform's tools over MCP (DESIGN §13,
// issue 12): `POST|GET|DELETE /mcp` is a Streamable HTTP MCP server (with
// github.com/modelcontextprotocol/go-sdk) for agents, so any MCP client
// library can be an agent's tool client.
//
// A request carries the agent's key (Bearer) and x-run-id; the MCP
// session is bound to that run (the SDK refuses the session's id with
// another run's). tools/list is the tools that run may call — the tool
// service's AgentTools, the same list GET /v1/tools?run_id= gives — named
// with their OpenAI spelling; tools/call is an invoke plus a wait through
// the tool service, with progress notifications while the call is pending
// (an approval, a client tool, a running tool); notifications/cancelled
// from the client cancels the tool call. The package translates MCP into
// calls of the tool service and never reaches past it.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	apauth "github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// Options configure a Server. Zero values pick defaults.
type Options struct {
	Keys   *apauth.Keys
	Tools  *toolsvc.Service
	Logger *slog.Logger
	// ProgressInterval is how often a pending tools/call sends a progress
	// notification (when the client asked for them). Default 1 s.
	ProgressInterval time.Duration
	// SessionTimeout closes MCP sessions idle this long. Default 30 min.
	SessionTimeout time.Duration
}

// Server is the /mcp endpoint of one process.
type Server struct {
	opts    Options
	handler http.Handler

	// stop ends every tools/call still waiting (Stop): the SDK's session
	// close waits for its handlers, so a shutdown must end them itself.
	stop     context.Context
	stopFn   context.CancelFunc
	stopOnce sync.Once

	// waits are the MCP sessions with tools/calls waiting, by session id:
	// ending a session (DELETE /mcp) ends their waits, as Stop does, or
	// the SDK's session close would wait for them — an approval may take
	// hours — and the DELETE with it.
	mu    sync.Mutex
	waits map[string]*sessionWaits
}

// sessionWaits are the tools/calls of one MCP session still waiting.
type sessionWaits struct {
	runID  string             // the run the session is bound to
	n      int                // the waits; the entry goes at 0
	ended  context.Context    // done when the session ends or on Stop
	cancel context.CancelFunc // ends it
}

// maxArgs bounds a tools/call's arguments as :invoke's 1 MiB body bounds
// its args (docs/API.md, Limits): the SDK's own bound on the body, 4 MiB,
// would let an agent store through /mcp what :invoke refuses. Refused as an
// isError result, not an HTTP 413, which the go-sdk client takes for a
// broken connection and ends its session with.
const maxArgs = 1 << 20

// MetaToolCallID is the _meta key of a tools/call result naming the
// platform's tool call.
const MetaToolCallID = "agentplane/tool_call_id"

type callerKey struct{}

// caller is who a request is from, as checked by authn.
type caller struct {
	agentID, runID, sessionID string
}

// New makes the /mcp server.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	s := &Server{opts: opts}
	s.stop, s.stopFn = context.WithCancel(context.Background())
	srv := mcp.NewServer(&mcp.Implementation{Name: "agentplane", Version: "1"}, &mcp.ServerOptions{
		Logger: sdkLogger(opts.Logger),
		// The tools differ per run and are read when listed; no
		// list_changed is sent.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		Instructions: "The tools this agent run may call on agentplane. Calls go through the platform's policy, approvals and deadlines; a call waiting for a human's approval may take minutes (progress notifications are sent while it waits).",
	})
	// One server for every run: the tools are looked up per request from
	// the run the request is for, so nothing is kept per run here.
	srv.AddReceivingMiddleware(s.tools)
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: opts.SessionTimeout,
		Logger:         sdkLogger(opts.Logger),
		// The SDK refuses a non-loopback Host on a loopback listener against
		// DNS rebinding from browsers; every request here carries an agent
		// key a rebinding page cannot have, and a platform behind a proxy on
		// loopback is reached with its public host name.
		DisableLocalhostProtection: true,
	})
	// The SDK remembers the UserID of the request that created a session
	// and refuses its session id with another: UserID = the run binds the
	// session to the run.
	bind := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, _ := r.Context().Value(callerKey{}).(caller)
		return &auth.TokenInfo{UserID: c.runID, Expiration: time.Now().Add(24 * time.Hour),
			Extra: map[string]any{"agent_id": c.agentID, "run_id": c.runID, "session_id": c.sessionID}}, nil
	}, nil)
	s.handler = s.envelope(s.authn(s.ending(bind(stream))))
	return s
}

// Routes registers /mcp on mux.
func (s *Server) Routes(mux *http.ServeMux) {
	mux.Handle("POST /mcp", s.handler)
	mux.Handle("GET /mcp", s.handler)
	mux.Handle("DELETE /mcp", s.handler)
}

// Stop ends the waits of tools/calls in flight (their tool calls go on:
// an agent can read them with GET /v1/tool_calls/{id}). Safe to call twice.
func (s *Server) Stop() { s.stopOnce.Do(s.stopFn) }

// authn checks the agent key and the run before the SDK sees the request,
// so refusals are the platform's structured errors.
func (s *Server) authn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.opts.Keys.Request(r)
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		if p.Kind != apauth.Agent {
			respond.Err(w, r, respond.E(http.StatusForbidden, "forbidden", "the /mcp server serves agents: use an agent key"))
			return
		}
		runID := r.Header.Get("x-run-id")
		if runID == "" {
			respond.Err(w, r, respond.E(http.StatusBadRequest, "missing_run_id", "send the x-run-id header of the run the MCP session is for"))
			return
		}
		run, err := s.opts.Tools.RunFor(r.Context(), p.AgentID, runID)
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), callerKey{}, caller{agentID: p.AgentID, runID: run.RunID, sessionID: run.SessionID})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ending ends the waits of a session's tools/calls before the SDK closes
// the session for a DELETE of its run (the SDK refuses another run's).
// Their tool calls go on, as for a connection that drops: each is answered
// session_ended (if its stream is still open), and the agent can read them
// with GET /v1/tool_calls/{id}.
func (s *Server) ending(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodDelete && id != "" {
			c, _ := r.Context().Value(callerKey{}).(caller)
			s.mu.Lock()
			if sw := s.waits[id]; sw != nil && sw.runID == c.runID {
				sw.cancel()
			}
			s.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// waitIn registers a wait of a tools/call of session id (bound to runID):
// the context ends with the session or on Stop; release when done waiting.
func (s *Server) waitIn(id, runID string) (context.Context, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waits == nil {
		s.waits = map[string]*sessionWaits{}
	}
	sw := s.waits[id]
	if sw == nil {
		sw = &sessionWaits{runID: runID}
		sw.ended, sw.cancel = context.WithCancel(s.stop)
		s.waits[id] = sw
	}
	sw.n++
	return sw.ended, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sw.n--; sw.n == 0 {
			sw.cancel()
			if s.waits[id] == sw {
				delete(s.waits, id)
			}
		}
	}
}

// callerOf reads who a request is from (per request, not per session:
// the SDK's ctx values are those of the session's first request).
func callerOf(extra *mcp.RequestExtra) (caller, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return caller{}, false
	}
	c := caller{}
	c.agentID, _ = extra.TokenInfo.Extra["agent_id"].(string)
	c.runID, _ = extra.TokenInfo.Extra["run_id"].(string)
	c.sessionID, _ = extra.TokenInfo.Extra["session_id"].(string)
	return c, c.agentID != "" && c.runID != ""
}

// tools answers tools/list and tools/call; the rest is the SDK's.
func (s *Server) tools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			return s.listTools(ctx, r)
		case *mcp.CallToolRequest:
			return s.callTool(ctx, r)
		}
		return next(ctx, method, req)
	}
}

func (s *Server) listTools(ctx context.Context, req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	c, ok := callerOf(req.Extra)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no caller"}
	}
	tools, err := s.opts.Tools.AgentTools(ctx, c.agentID)
	if err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, 0, len(tools))}
	for _, t := range tools {
		res.Tools = append(res.Tools, mcpTool(t))
	}
	return res, nil
}

// mcpTool is a platform tool as MCP lists it: named with its OpenAI
// spelling (the MCP recommended alphabet has no "@", and the agent may
// hand the list to a model as is), titled with its name.
func mcpTool(t *tool.Tool) *mcp.Tool {
	return &mcp.Tool{
		Name:        tool.FunctionName(t.Def.Name),
		Title:       t.Def.Name,
		Description: t.Def.Description,
		InputSchema: json.RawMessage(t.Def.Parameters),
	}
}

// callTool invokes the tool and waits for its call to end.
func (s *Server) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, ok := callerOf(req.Extra)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no caller"}
	}
	if len(req.Params.Arguments) > maxArgs {
		return errorResult("", "request_too_large", "the tool call's arguments exceed 1 MiB", nil), nil
	}
	log := s.opts.Logger.With("run_id", c.runID, "session_id", c.sessionID, "agent_id", c.agentID)
	who := toolsvc.Caller{AgentID: c.agentID}
	// Registered before the invoke, so a DELETE of the session meanwhile
	// ends the wait that follows.
	ended, release := s.waitIn(req.Session.ID(), c.runID)
	defer release()
	// The invoke is not cut short by a cancel: the call is created (or not)
	// whole, and a cancel arriving meanwhile is applied to it below.
	v, err := s.opts.Tools.Invoke(context.WithoutCancel(ctx), toolsvc.InvokeParams{
		AgentID: c.agentID, RunID: c.runID, ToolName: req.Params.Name, Args: req.Params.Arguments, NoWait: true,
	})
	if err != nil {
		if e := (*respond.Error)(nil); errors.As(err, &e) && e.Code == "tool_not_found" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", req.Params.Name)}
		}
		return refusal(err), nil
	}
	log = log.With("tool_call_id", v.ToolCallID, "tool_name", v.ToolName)
	token := req.Params.GetProgressToken()
	for i := 1; v.Status == toolsvc.StatusPending; i++ {
		if ctx.Err() != nil {
			// notifications/cancelled: the agent gave up on the call.
			cv, err := s.opts.Tools.Cancel(context.WithoutCancel(ctx), who, v.ToolCallID, "cancelled by the agent's MCP client")
			if err != nil {
				log.Warn("cancel a tool call the MCP client cancelled", "err", err)
			} else {
				log.Info("tool call cancelled by the MCP client", "state", cv.State)
			}
			return nil, ctx.Err()
		}
		if s.stop.Err() != nil {
			return errorResult(v.ToolCallID, "unavailable", "the platform is shutting down; the tool call goes on: read it with GET /v1/tool_calls/"+v.ToolCallID, nil), nil
		}
		if ended.Err() != nil {
			// The session ended (DELETE /mcp): the client gave up on it.
			log.Info("MCP session ended while its tool call waited; the call goes on")
			return errorResult(v.ToolCallID, "session_ended", "the MCP session ended; the tool call goes on: read it with GET /v1/tool_calls/"+v.ToolCallID, nil), nil
		}
		if token != nil {
			p := &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(i), Message: pendingMessage(v)}
			if err := req.Session.NotifyProgress(ctx, p); err != nil && ctx.Err() == nil {
				log.Debug("progress notification", "err", err)
			}
		}
		wctx, cancel := context.WithCancel(ctx)
		stopWait := context.AfterFunc(ended, cancel)
		next, err := s.opts.Tools.Wait(wctx, who, v.ToolCallID, s.opts.ProgressInterval)
		stopWait()
		cancel()
		switch {
		case err == nil:
			v = next
		case ctx.Err() == nil && ended.Err() == nil:
			return nil, fmt.Errorf("wait for tool call %s: %w", v.ToolCallID, err)
		}
		// A wait cut short by a cancel, a stop or the session's end: the top
		// of the loop says which.
	}
	return result(v), nil
}

// pendingMessage says what a pending call waits for.
func pendingMessage(v *toolsvc.CallView) string {
	switch v.State {
	case store.ToolCallWaitingApproval:
		return "waiting for a human's approval (approval " + v.ApprovalID + ")"
	case store.ToolCallWaitingClient:
		return "waiting for the user's client to run the tool"
	default:
		return "the tool is running (" + v.State + ")"
	}
}

// result renders an ended call. An MCP server's tool answers with the
// content it sent (text, images, resources) and its structuredContent;
// any other tool's result is its JSON as text, and as structuredContent
// when it is an object. A failed call is an isError result naming the
// code and message.
func result(v *toolsvc.CallView) *mcp.CallToolResult {
	meta := mcp.Meta{MetaToolCallID: v.ToolCallID}
	if v.Status != toolsvc.StatusSucceeded {
		e := v.Error
		if e == nil {
			e = &toolsvc.CallError{Code: v.State, Message: "the tool call ended " + v.State}
		}
		return errorResult(v.ToolCallID, e.Code, e.Message, e.Detail)
	}
	if tool.IsMCPName(v.ToolName) {
		var r mcp.CallToolResult
		if err := json.Unmarshal(v.Result, &r); err == nil {
			r.Meta, r.IsError = meta, false
			if r.Content == nil {
				r.Content = []mcp.Content{}
			}
			return &r
		}
	}
	r := &mcp.CallToolResult{Meta: meta, Content: []mcp.Content{&mcp.TextContent{Text: string(v.Result)}}}
	var obj map[string]any
	if json.Unmarshal(v.Result, &obj) == nil && obj != nil {
		r.StructuredContent = json.RawMessage(v.Result)
	}
	return r
}

// errorResult is a failed call: {"error": {code, message, detail?}} as text
// and as structuredContent, so a model reads why and a program can branch.
func errorResult(toolCallID, code, message string, detail json.RawMessage) *mcp.CallToolResult {
	body := map[string]any{"code": code, "message": message}
	if len(detail) > 0 {
		body["detail"] = detail
	}
	if toolCallID != "" {
		body["tool_call_id"] = toolCallID
	}
	return isErrorResult(body)
}

// isErrorResult is the isError result of the error object body, its
// tool_call_id (if any) also in _meta.
func isErrorResult(body map[string]any) *mcp.CallToolResult {
	b, _ := json.Marshal(map[string]any{"error": body})
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}
	if id, _ := body["tool_call_id"].(string); id != "" {
		r.Meta = mcp.Meta{MetaToolCallID: id}
	}
	return r
}

// refusal is an invoke the platform refused (bad args, a forbidden tool, an
// ended run): an isError result, so the model can correct itself. What the
// HTTP refusal adds to its error object (run_not_active's run_id and status,
// a replayed call's tool_call_id) is added here too, without overriding the
// result's own fields.
func refusal(err error) *mcp.CallToolResult {
	if e := (*respond.Error)(nil); errors.As(err, &e) {
		body := make(map[string]any, len(e.Details)+2)
		for k, v := range e.Details {
			body[k] = v
		}
		body["code"], body["message"] = e.Code, e.Message
		return isErrorResult(body)
	}
	return errorResult("", "internal", "the platform could not invoke the tool", nil)
}
