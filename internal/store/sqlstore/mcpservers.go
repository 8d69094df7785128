package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const mcpServerCols = `name, spec, created_at, updated_at`

func scanMCPServer(row interface{ Scan(...any) error }) (*store.MCPServerRow, error) {
	var s store.MCPServerRow
	if err := row.Scan(&s.Name, nullJSON{&s.Spec}, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return nil, err
	}
	return &s, nil
}

// MCPServerPut registers an MCP server or replaces its spec, reporting
// whether it was created; an insert that does nothing on conflict, then an
// update, for the reason ToolPut gives.
func (q *queries) MCPServerPut(ctx context.Context, p *store.MCPServerPutParams) (*store.MCPServerRow, bool, error) {
	if len(p.Spec) == 0 {
		return nil, false, fmt.Errorf("put MCP server %s: empty spec", p.Name)
	}
	spec := string(p.Spec)
	for range 3 {
		s, err := scanMCPServer(q.queryRow(ctx, true, `INSERT INTO mcp_servers (`+mcpServerCols+`) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO NOTHING RETURNING `+mcpServerCols, p.Name, spec, p.At, p.At))
		if err == nil {
			return s, true, nil
		}
		if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
			return nil, false, fmt.Errorf("put MCP server %s: %w", p.Name, err)
		}
		s, err = scanMCPServer(q.queryRow(ctx, true, `UPDATE mcp_servers SET spec = ?, updated_at = ? WHERE name = ? RETURNING `+mcpServerCols,
			spec, p.At, p.Name))
		if err == nil {
			return s, false, nil
		}
		if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
			return nil, false, fmt.Errorf("put MCP server %s: %w", p.Name, err)
		}
	}
	return nil, false, fmt.Errorf("put MCP server %s: concurrently deleted and re-created: %w", p.Name, store.ErrConflict)
}

// MCPServerGet reads one MCP server.
func (q *queries) MCPServerGet(ctx context.Context, name string) (*store.MCPServerRow, error) {
	s, err := scanMCPServer(q.queryRow(ctx, false, `SELECT `+mcpServerCols+` FROM mcp_servers WHERE name = ?`, name))
	if err != nil {
		return nil, fmt.Errorf("get MCP server %s: %w", name, mapErr(q.d, err))
	}
	return s, nil
}

// MCPServerList lists MCP servers by name.
func (q *queries) MCPServerList(ctx context.Context) ([]*store.MCPServerRow, error) {
	rows, err := q.query(ctx, `SELECT `+mcpServerCols+` FROM mcp_servers ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list MCP servers: %w", err)
	}
	defer rows.Close()
	out := []*store.MCPServerRow{}
	for rows.Next() {
		s, err := scanMCPServer(rows)
		if err != nil {
			return nil, fmt.Errorf("list MCP servers: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// MCPServerDelete removes an MCP server; ErrNotFound when absent. Overrides
// of its tools (rows of the tools table) are kept: registering the server
// again finds them.
func (q *queries) MCPServerDelete(ctx context.Context, name string) error {
	res, err := q.exec(ctx, `DELETE FROM mcp_servers WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete MCP server %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete MCP server %s: %w", name, store.ErrNotFound)
	}
	return nil
}
