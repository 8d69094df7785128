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
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// registry keeps compiled tools keyed by name and the row's updated_at, so
// a call reads one row from the store (replicas share the registry) but
// compiles a definition only once per version.
type registry struct {
	st    store.Store
	mu    sync.RWMutex
	cache map[string]compiled
}

type compiled struct {
	updatedAt int64
	tool      *tool.Tool
}

// ToolInfo is a registered tool as the admin API shows it: the definition
// with its defaults filled in.
type ToolInfo struct {
	tool.Definition
	CreatedAt int64 `json:"created_at"`
	UpdatedAt int64 `json:"updated_at"`
}

// get returns the compiled current version of name.
func (r *registry) get(ctx context.Context, name string) (*tool.Tool, *store.ToolRow, error) {
	row, err := r.st.ToolGet(ctx, name)
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
func (s *Service) PutTool(ctx context.Context, d tool.Definition) (*ToolInfo, bool, error) {
	t, err := tool.Compile(d)
	if err != nil {
		var ve *tool.ValidationError
		if errors.As(err, &ve) {
			e := badRequest("invalid_tool", ve.Error())
			e.Details = map[string]any{"field": ve.Field}
			return nil, false, e
		}
		return nil, false, err
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
	err = s.st.InTx(ctx, func(tx store.Queries) error {
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
	return &ToolInfo{Definition: t.Def, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}, nil
}

// ListTools returns every registered tool, by name.
func (s *Service) ListTools(ctx context.Context) ([]*ToolInfo, error) {
	rows, err := s.st.ToolList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*ToolInfo, 0, len(rows))
	for _, row := range rows {
		t, err := s.registry.compile(row)
		if err != nil {
			s.opts.Logger.Error("skipping a stored tool that no longer compiles", "tool_name", row.Name, "err", err)
			continue
		}
		out = append(out, &ToolInfo{Definition: t.Def, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt})
	}
	return out, nil
}

// DeleteTool removes a tool. Calls already made keep running under the
// definition they started with.
func (s *Service) DeleteTool(ctx context.Context, name string) error {
	err := s.st.InTx(ctx, func(tx store.Queries) error {
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

// ToolsForAgent returns the tools agentID may call as OpenAI
// function-calling tools, ready to hand to a model.
func (s *Service) ToolsForAgent(ctx context.Context, agentID string) ([]map[string]any, error) {
	infos, err := s.st.ToolList(ctx)
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, row := range infos {
		t, err := s.registry.compile(row)
		if err != nil || !t.AllowsAgent(agentID) {
			continue
		}
		out = append(out, t.OpenAISchema())
	}
	return out, nil
}
