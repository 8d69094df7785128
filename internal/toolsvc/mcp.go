package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// MCP servers as tool sources (DESIGN §13). The connection manager
// (internal/mcpclient) keeps a session to every registered server and
// knows what each lists; the tool service turns every listed tool into
// the tool "{server}@{tool}" — the server's schema under the server's
// defaults and the tools table's per-tool override, if any — and runs its
// calls through the same state machine as every other call, the manager
// only carrying the tools/call.

// MCPServer is what the connection manager knows of one MCP server.
type MCPServer struct {
	Name     string
	Defaults tool.MCPDefaults
	// Tools are the tools the server listed last (kept while it is
	// reconnecting), those the platform can offer only.
	Tools []tool.MCPListedTool
	// Version changes whenever Defaults or Tools change; compiled tools
	// are cached by it.
	Version uint64
	// Connected reports a live session; LastError says why not.
	Connected bool
	LastError string
	CreatedAt int64
	UpdatedAt int64
}

// MCPCall is one tools/call.
type MCPCall struct {
	Server, Tool string
	Args         json.RawMessage
	// ProgressToken, when set, asks the server for progress notifications,
	// which are handed to OnProgress (possibly after the call returned).
	ProgressToken string
	OnProgress    func(progress, total float64, message string)
}

// MCPResult is a tools/call answer: the content blocks and
// structuredContent as they came on the wire, each valid JSON (the
// source decoded or encoded them) or empty.
type MCPResult struct {
	Content           json.RawMessage
	StructuredContent json.RawMessage
	IsError           bool
}

// JSON is a call's result as the platform records it (and a failed
// call's error detail): {"content": [...], "structuredContent": ...},
// the latter only when the server sent one. Put together from the parts,
// which are valid JSON already, rather than re-validated by json.Marshal.
func (r *MCPResult) JSON() json.RawMessage {
	b := make([]byte, 0, len(`{"content":,"structuredContent":}`)+2+len(r.Content)+len(r.StructuredContent))
	content := r.Content
	if len(content) == 0 {
		content = json.RawMessage(`[]`)
	}
	b = append(append(b, `{"content":`...), content...)
	if len(r.StructuredContent) > 0 {
		b = append(append(b, `,"structuredContent":`...), r.StructuredContent...)
	}
	return append(b, '}')
}

// What CallMCP failures mean (wrapped in the error it returns). Anything
// else is the server's own error answer (a JSON-RPC error), or the ctx.
var (
	// ErrMCPUnreachable: the request was not sent (no session, connection
	// refused). The tool did not run.
	ErrMCPUnreachable = errors.New("MCP server unreachable")
	// ErrMCPOutcomeUnknown: the request was sent and the connection was lost
	// before the answer. The tool may have run.
	ErrMCPOutcomeUnknown = errors.New("MCP connection lost after the call was sent")
)

// MCPRPCError is a server's JSON-RPC error answer to a tools/call: the
// tool's own failure (an unknown tool, or arguments it refused, on servers
// that say so with an error instead of isError). The call's error detail
// holds it.
type MCPRPCError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *MCPRPCError) Error() string {
	return fmt.Sprintf("%s (JSON-RPC error %d)", e.Message, e.Code)
}

// MCPSource is the MCP connection manager.
type MCPSource interface {
	// MCPServer returns the server of that name, if it is registered.
	MCPServer(name string) (*MCPServer, bool)
	// MCPServers returns every registered server, by name.
	MCPServers() []*MCPServer
	// CallMCP sends one tools/call and waits for its answer or ctx;
	// cancelling ctx cancels the request on the server
	// (notifications/cancelled).
	CallMCP(ctx context.Context, call MCPCall) (*MCPResult, error)
}

// SetMCP sets the MCP connection manager once it exists (it is built
// with the service's store). Without one, no "{server}@{tool}" exists.
func (s *Service) SetMCP(m MCPSource) {
	s.registry.mu.Lock()
	s.registry.mcp = m
	s.registry.mu.Unlock()
}

func (r *registry) mcpSource() MCPSource {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mcp
}

// mcpCompiled caches the tool of one MCP server version and override row.
type mcpCompiled struct {
	version    uint64
	overrideAt int64
	tool       *tool.Tool
	err        error
}

// getMCP returns the compiled tool "{server}@{tool}" and, as its row, the
// override if there is one (else a row dated like the server).
func (r *registry) getMCP(ctx context.Context, name string) (*tool.Tool, *store.ToolRow, error) {
	serverName, toolName, _ := tool.SplitMCPName(name)
	src := r.mcpSource()
	if src == nil {
		return nil, nil, ErrToolNotFound
	}
	srv, ok := src.MCPServer(serverName)
	if !ok {
		return nil, nil, ErrToolNotFound
	}
	i := slices.IndexFunc(srv.Tools, func(t tool.MCPListedTool) bool { return t.Name == toolName })
	if i < 0 {
		if !srv.Connected && len(srv.Tools) == 0 {
			msg := "MCP server " + serverName + " is not connected, so its tools are not known yet"
			if srv.LastError != "" {
				msg += " (last error: " + srv.LastError + ")"
			}
			return nil, nil, respond.E(http.StatusServiceUnavailable, "tool_unreachable", msg)
		}
		return nil, nil, ErrToolNotFound
	}
	row, err := r.rows.Get(ctx, name, r.st.ToolGet)
	if errors.Is(err, store.ErrNotFound) {
		row = nil
	} else if err != nil {
		return nil, nil, err
	}
	t, err := r.compileMCP(srv, srv.Tools[i], row)
	if err != nil {
		return nil, nil, err
	}
	if row == nil {
		row = r.mcpRow(name)
	}
	return t, row, nil
}

// mcpRow stands in for the row of an MCP tool without an override: it is
// dated like its server's registration.
func (r *registry) mcpRow(name string) *store.ToolRow {
	row := &store.ToolRow{Name: name}
	server, _, _ := tool.SplitMCPName(name)
	if src := r.mcpSource(); src != nil {
		if srv, ok := src.MCPServer(server); ok {
			row.CreatedAt, row.UpdatedAt = srv.CreatedAt, srv.UpdatedAt
		}
	}
	return row
}

// compileMCP compiles a listed tool under its server's defaults and
// override row (nil: none), once per version of either.
func (r *registry) compileMCP(srv *MCPServer, listed tool.MCPListedTool, row *store.ToolRow) (*tool.Tool, error) {
	name := tool.MCPName(srv.Name, listed.Name)
	var overrideAt int64
	if row != nil {
		overrideAt = row.UpdatedAt
	}
	r.mu.RLock()
	c, ok := r.mcpCache[name]
	r.mu.RUnlock()
	if ok && c.version == srv.Version && c.overrideAt == overrideAt {
		return c.tool, c.err
	}
	var override *tool.Definition
	if row != nil {
		var d tool.Definition
		if err := json.Unmarshal(row.Definition, &d); err != nil {
			return nil, fmt.Errorf("stored override of tool %s: %w", name, err)
		}
		override = &d
	}
	t, err := tool.Compile(tool.MCPDefinition(srv.Name, srv.Defaults, listed, override))
	if err != nil {
		err = fmt.Errorf("MCP tool %s: %w", name, err)
	}
	r.mu.Lock()
	if r.mcpCache == nil {
		r.mcpCache = map[string]mcpCompiled{}
	}
	r.mcpCache[name] = mcpCompiled{version: srv.Version, overrideAt: overrideAt, tool: t, err: err}
	r.mu.Unlock()
	return t, err
}

// mcpTools returns every MCP server's tools, compiled, by name; overrides
// are the tools table's rows by name.
func (s *Service) mcpTools(overrides map[string]*store.ToolRow) []*tool.Tool {
	src := s.registry.mcpSource()
	if src == nil {
		return nil
	}
	var out []*tool.Tool
	for _, srv := range src.MCPServers() {
		for _, listed := range srv.Tools {
			t, err := s.registry.compileMCP(srv, listed, overrides[tool.MCPName(srv.Name, listed.Name)])
			if err != nil {
				continue // the manager compiled it when it was listed: only a changed override can get here
			}
			out = append(out, t)
		}
	}
	return out
}

// putMCPOverride stores the per-tool override of an MCP server's tool
// (PUT /v1/tools/{server}@{tool}). The server must be registered; the tool
// need not be listed yet (the server may be down).
func (s *Service) putMCPOverride(ctx context.Context, d tool.Definition) (*ToolInfo, bool, error) {
	d, err := tool.CheckMCPOverride(d)
	if err != nil {
		return nil, false, invalidTool(err)
	}
	server, _, _ := tool.SplitMCPName(d.Name)
	if _, err := s.st.MCPServerGet(ctx, server); errors.Is(err, store.ErrNotFound) {
		return nil, false, respond.E(http.StatusNotFound, "mcp_server_not_found", "no MCP server named "+server+" is registered; register it first (PUT /v1/mcp_servers/"+server+")")
	} else if err != nil {
		return nil, false, err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, false, err
	}
	var row *store.ToolRow
	var created bool
	err = s.writeTools(ctx, func(tx store.Queries) error {
		if audit.ActorFrom(ctx) == audit.Config {
			if cur, err := tx.ToolGet(ctx, d.Name); err == nil && string(cur.Definition) == string(raw) {
				row, created = cur, false
				return nil // the config file applied again: nothing changed
			}
		}
		var err error
		if row, created, err = tx.ToolPut(ctx, &store.ToolPutParams{Name: d.Name, Definition: raw, At: s.now()}); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.ToolPut, d.Name, map[string]any{"created": created, "kind": tool.KindMCP, "policy": d.Policy.Decision})
	})
	if err != nil {
		return nil, false, err
	}
	info, err := s.GetTool(ctx, d.Name)
	if err != nil {
		// Not listed (yet): show the override as stored.
		info = &ToolInfo{Definition: d, MCPServer: server, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
	}
	info.Override = &d
	return info, created, nil
}

// invalidTool answers a *tool.ValidationError as 400 invalid_tool naming
// the field.
func invalidTool(err error) error {
	var ve *tool.ValidationError
	if errors.As(err, &ve) {
		e := badRequest("invalid_tool", ve.Error())
		e.Details = map[string]any{"field": ve.Field}
		return e
	}
	return err
}

// RunFor returns runID if it is agentID's (the /mcp server binds each of
// its sessions to such a run); ErrRunForbidden otherwise.
func (s *Service) RunFor(ctx context.Context, agentID, runID string) (*store.Run, error) {
	run, err := s.st.RunGet(ctx, runID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.AgentID != agentID) {
		return nil, ErrRunForbidden
	}
	return run, err
}

// mcpInflight holds the cancel functions of this process's MCP requests in
// flight, so that a call ending while its request runs (cancelled, timed
// out, its run ended — here or on another replica) also cancels the
// request on the MCP server instead of leaving the tool running.
type mcpInflight struct {
	mu    sync.Mutex
	calls map[string]inflightCall
}

type inflightCall struct {
	sessionID string
	cancel    context.CancelFunc
}

func (m *mcpInflight) add(callID, sessionID string, cancel context.CancelFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string]inflightCall{}
	}
	m.calls[callID] = inflightCall{sessionID: sessionID, cancel: cancel}
}

func (m *mcpInflight) remove(callID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.calls, callID)
}

// ended cancels the request of a call that reached a final state.
func (m *mcpInflight) ended(callID string) {
	m.mu.Lock()
	c, ok := m.calls[callID]
	m.mu.Unlock()
	if ok {
		c.cancel()
	}
}

// inSessions returns the calls in flight in the given sessions (nil: all).
func (m *mcpInflight) inSessions(sessionIDs []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, c := range m.calls {
		if sessionIDs == nil || slices.Contains(sessionIDs, c.sessionID) {
			out = append(out, id)
		}
	}
	return out
}
