package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const toolCols = `tool_name, definition, created_at, updated_at`

func scanTool(row interface{ Scan(...any) error }) (*store.ToolRow, error) {
	var t store.ToolRow
	if err := row.Scan(&t.Name, nullJSON{&t.Definition}, &t.CreatedAt, &t.UpdatedAt); err != nil {
		return nil, err
	}
	return &t, nil
}

// ToolPut registers a tool or replaces its definition, reporting whether it
// was created. It is an insert that does nothing on conflict followed by an
// update, rather than one upsert, because neither database's upsert can say
// portably which of the two it did; a delete between the two statements
// just sends it round again.
func (q *queries) ToolPut(ctx context.Context, p *store.ToolPutParams) (*store.ToolRow, bool, error) {
	if len(p.Definition) == 0 {
		return nil, false, fmt.Errorf("put tool %s: empty definition", p.Name)
	}
	def := string(p.Definition)
	for range 3 {
		t, err := scanTool(q.queryRow(ctx, true, `INSERT INTO tools (`+toolCols+`) VALUES (?, ?, ?, ?)
			ON CONFLICT (tool_name) DO NOTHING RETURNING `+toolCols, p.Name, def, p.At, p.At))
		if err == nil {
			return t, true, nil
		}
		if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
			return nil, false, fmt.Errorf("put tool %s: %w", p.Name, err)
		}
		t, err = scanTool(q.queryRow(ctx, true, `UPDATE tools SET definition = ?, updated_at = ? WHERE tool_name = ? RETURNING `+toolCols,
			def, p.At, p.Name))
		if err == nil {
			return t, false, nil
		}
		if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
			return nil, false, fmt.Errorf("put tool %s: %w", p.Name, err)
		}
	}
	return nil, false, fmt.Errorf("put tool %s: concurrently deleted and re-created: %w", p.Name, store.ErrConflict)
}

// ToolGet reads a tool.
func (q *queries) ToolGet(ctx context.Context, name string) (*store.ToolRow, error) {
	t, err := scanTool(q.queryRow(ctx, false, `SELECT `+toolCols+` FROM tools WHERE tool_name = ?`, name))
	if err != nil {
		return nil, fmt.Errorf("get tool %s: %w", name, mapErr(q.d, err))
	}
	return t, nil
}

// ToolList lists tools by name.
func (q *queries) ToolList(ctx context.Context) ([]*store.ToolRow, error) {
	rows, err := q.query(ctx, `SELECT `+toolCols+` FROM tools ORDER BY tool_name`)
	if err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	defer rows.Close()
	out := []*store.ToolRow{}
	for rows.Next() {
		t, err := scanTool(rows)
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// ToolDelete removes a tool; ErrNotFound when absent. Its past calls keep
// their tool_name.
func (q *queries) ToolDelete(ctx context.Context, name string) error {
	res, err := q.exec(ctx, `DELETE FROM tools WHERE tool_name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete tool %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete tool %s: %w", name, store.ErrNotFound)
	}
	return nil
}
