package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/rowcache"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// registry keeps compiled tools keyed by name and the row's updated_at, so
// a call reads one row from the store (replicas share the registry) but
// compiles a definition only once per version.
type registry struct {
	st    store.Store
	rows  rowcache.Cache[*store.ToolRow] // the rows themselves, briefly (rowcache.go)
	mu    sync.RWMutex
	cache map[string]compiled

	mcp      MCPSource // see mcp.go
	mcpCache map[string]mcpCompiled
}

type compiled struct {
	updatedAt int64
	tool      *tool.Tool
}

// ToolInfo is a registered tool as the admin API shows it: the definition
// with its defaults filled in.
type ToolInfo struct {
	tool.Definition
	// MCPServer names the MCP server of a "{server}@{tool}" tool.
	MCPServer string `json:"mcp_server,omitempty"`
	// Override is an MCP tool's per-tool override as stored, if any.
	Override  *tool.Definition `json:"override,omitempty"`
	CreatedAt int64            `json:"created_at"`
	UpdatedAt int64            `json:"updated_at"`
}

// get returns the compiled current version of name (either spelling).
func (r *registry) get(ctx context.Context, name string) (*tool.Tool, *store.ToolRow, error) {
	name = tool.CanonicalName(name)
	if tool.IsMCPName(name) {
		return r.getMCP(ctx, name)
	}
	row, err := r.rows.Get(ctx, name, r.st.ToolGet)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, ErrToolNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	t, err := r.compile(row)
	return t, row, err
}

func (r *registry) compile(row *store.ToolRow) (*tool.Tool, error) {
	r.mu.RLock()
	c, ok := r.cache[row.Name]
	r.mu.RUnlock()
	if ok && c.updatedAt == row.UpdatedAt {
		return c.tool, nil
	}
	var d tool.Definition
	if err := json.Unmarshal(row.Definition, &d); err != nil {
		return nil, fmt.Errorf("stored definition of tool %s: %w", row.Name, err)
	}
	t, err := tool.Compile(d)
	if err != nil {
		return nil, fmt.Errorf("stored definition of tool %s: %w", row.Name, err)
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]compiled{}
	}
	r.cache[row.Name] = compiled{updatedAt: row.UpdatedAt, tool: t}
	r.mu.Unlock()
	return t, nil
}

// PutTool registers d (or replaces the tool of that name). Everything that
// could fail at call time is checked here: the schema, every CEL rule and,
// for a server tool, the endpoint against the allowlist. It reports
// whether the tool was created.
//
// A call_<agent_id> name overrides that agent tool's description, policy,
// timeout_ms, approval_timeout_ms and on_failure; its kind is "agent"
// (absent means so) and its parameters are fixed.
func (s *Service) PutTool(ctx context.Context, d tool.Definition) (*ToolInfo, bool, error) {
	if isAgentTool(d.Name) && d.Kind == "" {
		d.Kind = tool.KindAgent
	}
	if tool.IsMCPName(d.Name) || d.Kind == tool.KindMCP {
		return s.putMCPOverride(ctx, d)
	}
	t, err := tool.Compile(d)
	if err != nil {
		return nil, false, invalidTool(err)
	}
	if t.Def.Kind == tool.KindServer && s.opts.Allow != nil {
		if _, err := s.opts.Allow.ValidateEndpoint(ctx, t.Def.Endpoint); err != nil {
			var ee *agent.EndpointError
			if errors.As(err, &ee) {
				return nil, false, respond.E(http.StatusBadRequest, ee.Code, "endpoint: "+ee.Message)
			}
			return nil, false, err
		}
	}
	def, err := json.Marshal(t.Def)
	if err != nil {
		return nil, false, err
	}
	var row *store.ToolRow
	var created bool
	// The change and its audit row commit together (DESIGN §15).
	err = s.writeTools(ctx, func(tx store.Queries) error {
		if audit.ActorFrom(ctx) == audit.Config {
			// The config file is applied at every start: a definition it
			// already stored is left alone, and not audited again.
			if cur, err := tx.ToolGet(ctx, t.Def.Name); err == nil && string(cur.Definition) == string(def) {
				row, created = cur, false
				return nil
			}
		}
		var err error
		if row, created, err = tx.ToolPut(ctx, &store.ToolPutParams{Name: t.Def.Name, Definition: def, At: s.now()}); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.ToolPut, t.Def.Name, map[string]any{"created": created, "kind": t.Def.Kind, "policy": t.Def.Policy.Decision})
	})
	if err != nil {
		return nil, false, err
	}
	return &ToolInfo{Definition: t.Def, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}, created, nil
}

// GetTool returns the registered tool name.
func (s *Service) GetTool(ctx context.Context, name string) (*ToolInfo, error) {
	t, row, err := s.registry.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return toolInfo(t, row), nil
}

// toolInfo shows a compiled tool and its row (for an MCP tool, its
// override or none).
func toolInfo(t *tool.Tool, row *store.ToolRow) *ToolInfo {
	info := &ToolInfo{Definition: t.Def, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
	if server, _, ok := tool.SplitMCPName(t.Def.Name); ok {
		info.MCPServer = server
		var o tool.Definition
		if len(row.Definition) > 0 && json.Unmarshal(row.Definition, &o) == nil {
			info.Override = &o
		}
	}
	return info
}

// ListTools returns every registered tool, by name, then the tools of the
// MCP servers (with their overrides).
func (s *Service) ListTools(ctx context.Context) ([]*ToolInfo, error) {
	rows, err := s.st.ToolList(ctx)
	if err != nil {
		return nil, err
	}
	return s.toolInfos(rows, true), nil
}

// ListToolsPage reads up to limit tools named after afterName, by name.
// next is the name to continue after when limit rows were read ("" at the
// end); a row that no longer compiles is skipped but still moves next on.
func (s *Service) ListToolsPage(ctx context.Context, afterName string, limit int) (infos []*ToolInfo, next string, err error) {
	rows, err := s.st.ToolListPage(ctx, afterName, limit)
	if err != nil {
		return nil, "", err
	}
	if len(rows) == limit && limit > 0 {
		next = rows[len(rows)-1].Name
	}
	// The MCP servers' tools are not rows: they follow the last page.
	return s.toolInfos(rows, next == ""), next, nil
}

// toolInfos shows rows (call_<agent_id> overrides included) and, withMCP,
// the MCP servers' tools after them.
func (s *Service) toolInfos(rows []*store.ToolRow, withMCP bool) []*ToolInfo {
	out := make([]*ToolInfo, 0, len(rows))
	overrides := map[string]*store.ToolRow{}
	for _, row := range rows {
		if tool.IsMCPName(row.Name) {
			overrides[row.Name] = row
			continue
		}
		t, err := s.registry.compile(row)
		if err != nil {
			s.opts.Logger.Error("skipping a stored tool that no longer compiles", "tool_name", row.Name, "err", err)
			continue
		}
		out = append(out, &ToolInfo{Definition: t.Def, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt})
	}
	if withMCP {
		for _, t := range s.mcpTools(overrides) {
			row := overrides[t.Def.Name]
			if row == nil {
				row = s.registry.mcpRow(t.Def.Name)
			}
			out = append(out, toolInfo(t, row))
		}
	}
	return out
}

// DeleteTool removes a tool, or an MCP tool's override. Calls already made
// keep running under the definition they started with.
func (s *Service) DeleteTool(ctx context.Context, name string) error {
	name = tool.CanonicalName(name)
	err := s.writeTools(ctx, func(tx store.Queries) error {
		if err := tx.ToolDelete(ctx, name); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.ToolDelete, name, nil)
	})
	if errors.Is(err, store.ErrNotFound) {
		return ErrToolNotFound
	}
	return err
}

// ToolsForAgent returns the tools agentID may call (AgentTools) as OpenAI
// function-calling tools, ready to hand to a model.
func (s *Service) ToolsForAgent(ctx context.Context, agentID string) ([]map[string]any, error) {
	tools, err := s.AgentTools(ctx, agentID)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.OpenAISchema())
	}
	return out, nil
}

// AgentTools returns the tools agentID may call: the registry's, the MCP
// servers', then call_<agent_id> for each agent it links (DESIGN §11). It
// is the one list every surface offers an agent
// (GET /v1/tools?run_id=, the /mcp server's tools/list).
func (s *Service) AgentTools(ctx context.Context, agentID string) ([]*tool.Tool, error) {
	rows, err := s.st.ToolList(ctx)
	if err != nil {
		return nil, err
	}
	out := []*tool.Tool{}
	overrides := map[string]*store.ToolRow{}
	for _, row := range rows {
		if tool.IsMCPName(row.Name) {
			overrides[row.Name] = row
			continue
		}
		if isAgentTool(row.Name) {
			continue // an override: listed below when agentID links the agent
		}
		t, err := s.registry.compile(row)
		if err != nil || !t.AllowsAgent(agentID) {
			continue
		}
		out = append(out, t)
	}
	for _, t := range s.mcpTools(overrides) {
		if t.AllowsAgent(agentID) {
			out = append(out, t)
		}
	}
	agents, err := s.agentToolsFor(ctx, agentID)
	if err != nil {
		return nil, err
	}
	return append(out, agents...), nil
}
