package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

const toolCallCols = `tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, result, error,
	idempotency_key, args_hash, approval_id, policy, deadline_at, timeout_ms, attempts, created_at, updated_at, ended_at`

func scanToolCall(row interface{ Scan(...any) error }) (*store.ToolCall, error) {
	var c store.ToolCall
	err := row.Scan(&c.ToolCallID, &c.RunID, &c.SessionID, &c.AgentID, &c.ToolName, &c.Kind, &c.Status,
		nullJSON{&c.Args}, nullJSON{&c.Result}, nullJSON{&c.Error},
		&c.IdempotencyKey, &c.ArgsHash, &c.ApprovalID, nullJSON{&c.Policy}, nullInt{&c.DeadlineAt},
		&c.TimeoutMS, &c.Attempts, &c.CreatedAt, &c.UpdatedAt, nullInt{&c.EndedAt})
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func scanToolCalls(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) ([]*store.ToolCall, error) {
	out := []*store.ToolCall{}
	for rows.Next() {
		c, err := scanToolCall(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ToolCallInsert inserts a CREATED tool call. ON CONFLICT DO NOTHING (no
// target, so it covers the partial unique index on (run_id,
// idempotency_key) as well as the primary key) keeps a PostgreSQL
// transaction usable; a concurrent inserter of the same key waits for the
// first to commit and then does nothing, so the SELECT that follows sees
// the winner. That row comes back with ErrDuplicate.
func (q *queries) ToolCallInsert(ctx context.Context, p *store.ToolCallInsertParams) (*store.ToolCall, error) {
	status := store.ToolCallCreated
	if len(p.Policy) > 0 {
		status = store.ToolCallPolicyChecked
	}
	var deadline any // NULL
	attempts := 0
	if p.ClaimDeadlineAt > 0 && len(p.Policy) > 0 {
		status, deadline, attempts = store.ToolCallRunning, p.ClaimDeadlineAt, 1
	}
	c, err := scanToolCall(q.queryRow(ctx, true, `INSERT INTO tool_calls (tool_call_id, run_id, session_id, agent_id, tool_name, kind, status,
			args, idempotency_key, args_hash, timeout_ms, created_at, updated_at, policy, deadline_at, attempts)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING `+toolCallCols,
		p.ToolCallID, p.RunID, p.SessionID, p.AgentID, p.ToolName, p.Kind, status,
		jsonArg(p.Args, "{}"), p.IdempotencyKey, p.ArgsHash, p.TimeoutMS, p.At, p.At, jsonArg(p.Policy, ""), deadline, attempts))
	if err == nil {
		return c, nil
	}
	if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("insert tool call %s: %w", p.ToolCallID, err)
	}
	if p.IdempotencyKey != "" {
		c, err := scanToolCall(q.queryRow(ctx, true, `SELECT `+toolCallCols+` FROM tool_calls WHERE run_id = ? AND idempotency_key = ? AND idempotency_key <> ''`,
			p.RunID, p.IdempotencyKey))
		if err == nil {
			return c, fmt.Errorf("insert tool call: run %s already has key %q (%s): %w", p.RunID, p.IdempotencyKey, c.ToolCallID, store.ErrDuplicate)
		}
		if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("insert tool call %s: %w", p.ToolCallID, err)
		}
	}
	return nil, fmt.Errorf("insert tool call %s: id taken: %w", p.ToolCallID, store.ErrConflict)
}

// ToolCallGetByKey reads the run's call with that idempotency key.
func (q *queries) ToolCallGetByKey(ctx context.Context, runID, idempotencyKey string) (*store.ToolCall, error) {
	if idempotencyKey == "" {
		return nil, fmt.Errorf("get tool call of run %s by key: no key: %w", runID, store.ErrNotFound)
	}
	c, err := scanToolCall(q.queryRow(ctx, false, `SELECT `+toolCallCols+` FROM tool_calls WHERE run_id = ? AND idempotency_key = ?`, runID, idempotencyKey))
	if err != nil {
		return nil, fmt.Errorf("get tool call of run %s by key %q: %w", runID, idempotencyKey, mapErr(q.d, err))
	}
	return c, nil
}

// ToolCallGet reads a tool call.
func (q *queries) ToolCallGet(ctx context.Context, toolCallID string) (*store.ToolCall, error) {
	c, err := scanToolCall(q.queryRow(ctx, false, `SELECT `+toolCallCols+` FROM tool_calls WHERE tool_call_id = ?`, toolCallID))
	if err != nil {
		return nil, fmt.Errorf("get tool call %s: %w", toolCallID, mapErr(q.d, err))
	}
	return c, nil
}

// ToolCallTransition is the guarded state change, one UPDATE whose SET
// clause holds only what changes. On no match it returns the current row
// and ErrConflict (ErrNotFound when there is no such call).
func (q *queries) ToolCallTransition(ctx context.Context, p *store.ToolCallTransitionParams) (*store.ToolCall, error) {
	if len(p.From) == 0 {
		return nil, fmt.Errorf("tool call transition %s: empty From", p.ID)
	}
	to := p.Status
	if p.Via != "" {
		if !store.ToolCallCanTransition(p.Via, p.Status) {
			return nil, fmt.Errorf("tool call transition %s: %s -> %s is not an edge of the state machine", p.ID, p.Via, p.Status)
		}
		to = p.Via
	}
	for _, f := range p.From {
		if !store.ToolCallCanTransition(f, to) {
			return nil, fmt.Errorf("tool call transition %s: %s -> %s is not an edge of the state machine", p.ID, f, to)
		}
	}
	set := []string{"status = ?", "updated_at = ?"}
	args := []any{p.Status, p.At}
	switch {
	case store.ToolCallTerminal(p.Status):
		set = append(set, "ended_at = ?", "deadline_at = NULL")
		args = append(args, p.At)
	case p.DeadlineAt != nil && *p.DeadlineAt == 0:
		set = append(set, "deadline_at = NULL")
	case p.DeadlineAt != nil:
		set = append(set, "deadline_at = ?")
		args = append(args, *p.DeadlineAt)
	}
	for _, c := range []struct {
		col string
		v   []byte
	}{{"result", p.Result}, {"error", p.Error}, {"policy", p.Policy}} {
		if len(c.v) > 0 {
			set = append(set, c.col+" = ?")
			args = append(args, string(c.v))
		}
	}
	if p.ApprovalID != nil {
		set = append(set, "approval_id = ?")
		args = append(args, *p.ApprovalID)
	}
	if p.IncAttempts {
		set = append(set, "attempts = attempts + 1")
	}
	query := `UPDATE tool_calls SET ` + strings.Join(set, ", ") +
		` WHERE tool_call_id = ? AND status IN (` + placeholders(len(p.From)) + `)`
	args = append(args, p.ID)
	for _, s := range p.From {
		args = append(args, s)
	}
	if p.IfDueBy != 0 {
		query += ` AND deadline_at <= ?`
		args = append(args, p.IfDueBy)
	}
	c, err := scanToolCall(q.queryRow(ctx, true, query+` RETURNING `+toolCallCols, args...))
	if err == nil {
		return c, nil
	}
	if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("tool call transition %s -> %s: %w", p.ID, p.Status, err)
	}
	cur, err := scanToolCall(q.queryRow(ctx, true, `SELECT `+toolCallCols+` FROM tool_calls WHERE tool_call_id = ?`, p.ID))
	if err != nil {
		return nil, fmt.Errorf("tool call transition %s: %w", p.ID, mapErr(q.d, err))
	}
	if p.IfDueBy != 0 && slices.Contains(p.From, cur.Status) {
		return cur, fmt.Errorf("tool call %s is not due by %d (deadline %d): %w", p.ID, p.IfDueBy, cur.DeadlineAt, store.ErrConflict)
	}
	return cur, fmt.Errorf("tool call %s is %s, not %s: %w", p.ID, cur.Status, strings.Join(p.From, "|"), store.ErrConflict)
}

// ToolCallListDue lists non-terminal calls whose deadline has passed,
// earliest first: the sweeper's input. Several sweepers may list the same
// call; the guarded transition lets one of them act.
func (q *queries) ToolCallListDue(ctx context.Context, p *store.ToolCallListDueParams) ([]*store.ToolCall, error) {
	rows, err := q.query(ctx, `SELECT `+toolCallCols+` FROM tool_calls
		WHERE ended_at IS NULL AND deadline_at IS NOT NULL AND deadline_at <= ?
		ORDER BY deadline_at, tool_call_id LIMIT ?`, p.Now, listLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list due tool calls: %w", err)
	}
	defer rows.Close()
	out, err := scanToolCalls(rows)
	if err != nil {
		return nil, fmt.Errorf("list due tool calls: %w", err)
	}
	return out, nil
}

// ToolCallListActiveByRun lists a run's non-terminal calls, oldest first
// (the cancel cascade).
func (q *queries) ToolCallListActiveByRun(ctx context.Context, runID string) ([]*store.ToolCall, error) {
	rows, err := q.query(ctx, `SELECT `+toolCallCols+` FROM tool_calls
		WHERE run_id = ? AND ended_at IS NULL ORDER BY created_at, tool_call_id`, runID)
	if err != nil {
		return nil, fmt.Errorf("list active tool calls of run %s: %w", runID, err)
	}
	defer rows.Close()
	out, err := scanToolCalls(rows)
	if err != nil {
		return nil, fmt.Errorf("list active tool calls of run %s: %w", runID, err)
	}
	return out, nil
}

// ToolCallListPendingClient lists a session's calls waiting for its client,
// oldest first, to send again to a client that subscribes.
func (q *queries) ToolCallListPendingClient(ctx context.Context, sessionID string) ([]*store.ToolCall, error) {
	rows, err := q.query(ctx, `SELECT `+toolCallCols+` FROM tool_calls
		WHERE session_id = ? AND status = 'WAITING_CLIENT' ORDER BY created_at, tool_call_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list pending client tool calls of session %s: %w", sessionID, err)
	}
	defer rows.Close()
	out, err := scanToolCalls(rows)
	if err != nil {
		return nil, fmt.Errorf("list pending client tool calls of session %s: %w", sessionID, err)
	}
	return out, nil
}

// listLimit bounds a list: non-positive means 1000, and no page exceeds
// 10000 rows.
func listLimit(n int) int {
	if n <= 0 {
		return 1000
	}
	return min(n, 10000)
}
