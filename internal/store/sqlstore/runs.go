package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

const runCols = `run_id, session_id, agent_id, parent_run_id, user_id, status, owner, started_at, ended_at, error, usage`

func scanRun(row interface{ Scan(...any) error }) (*store.Run, error) {
	var r store.Run
	err := row.Scan(&r.RunID, &r.SessionID, &r.AgentID, &r.ParentRunID, &r.UserID, &r.Status, &r.Owner,
		&r.StartedAt, nullInt{&r.EndedAt}, nullJSON{&r.Error}, nullJSON{&r.Usage})
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// RunInsert inserts a RUNNING run. ON CONFLICT DO NOTHING covers both the
// primary key and the one-active-root-run-per-session index, so a busy
// session is a clean ErrConflict rather than an aborted transaction.
func (q *queries) RunInsert(ctx context.Context, p *store.RunInsertParams) (*store.Run, error) {
	r, err := scanRun(q.queryRow(ctx, true, `INSERT INTO runs (run_id, session_id, agent_id, parent_run_id, user_id, status, owner, started_at)
		VALUES (?, ?, ?, ?, ?, 'RUNNING', ?, ?) ON CONFLICT DO NOTHING RETURNING `+runCols,
		p.RunID, p.SessionID, p.AgentID, p.ParentRunID, p.UserID, p.Owner, p.StartedAt))
	if err != nil {
		err = mapErr(q.d, err)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("insert run %s: session %s has an active run: %w", p.RunID, p.SessionID, store.ErrConflict)
		}
		return nil, fmt.Errorf("insert run %s: %w", p.RunID, err)
	}
	return r, nil
}

// RunGet reads a run.
func (q *queries) RunGet(ctx context.Context, runID string) (*store.Run, error) {
	r, err := scanRun(q.queryRow(ctx, false, `SELECT `+runCols+` FROM runs WHERE run_id = ?`, runID))
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", runID, mapErr(q.d, err))
	}
	return r, nil
}

// RunLock reads a run inside a transaction and, on PostgreSQL, locks its
// row until the transaction ends (SQLite has one writer: every write
// transaction is already exclusive).
func (q *queries) RunLock(ctx context.Context, runID string) (*store.Run, error) {
	query := `SELECT ` + runCols + ` FROM runs WHERE run_id = ?`
	if q.d.Name == "postgres" {
		query += ` FOR UPDATE`
	}
	r, err := scanRun(q.queryRow(ctx, true, query, runID))
	if err != nil {
		return nil, fmt.Errorf("lock run %s: %w", runID, mapErr(q.d, err))
	}
	return r, nil
}

// RunsEnded reports which of runIDs are in a terminal state, share-locking
// their rows on PostgreSQL (see store.Queries).
func (q *queries) RunsEnded(ctx context.Context, runIDs []string) (map[string]bool, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	query := `SELECT run_id, status FROM runs WHERE run_id IN (` + placeholders(len(runIDs)) + `)`
	if q.d.Name == "postgres" {
		query += ` FOR SHARE`
	}
	args := make([]any, len(runIDs))
	for i, id := range runIDs {
		args[i] = id
	}
	rows, err := q.queryWrite(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("runs ended: %w", err)
	}
	defer rows.Close()
	ended := map[string]bool{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, fmt.Errorf("runs ended: %w", err)
		}
		if store.RunIsTerminal(status) {
			ended[id] = true
		}
	}
	return ended, rows.Err()
}

// RunTransition is the guarded state change: it updates only when the run
// is in one of p.From. On no match it returns the current row and
// ErrConflict, so the caller can answer 409 or treat it as already done.
func (q *queries) RunTransition(ctx context.Context, p *store.RunTransitionParams) (*store.Run, error) {
	if len(p.From) == 0 {
		return nil, fmt.Errorf("run transition %s: empty From", p.RunID)
	}
	var endedAt any
	if store.RunIsTerminal(p.Status) {
		endedAt = p.At
	}
	args := []any{p.Status, endedAt, jsonArg(p.Error, ""), jsonArg(p.Usage, ""), p.RunID}
	for _, s := range p.From {
		args = append(args, s)
	}
	query := `UPDATE runs SET status = ?, ended_at = ?, error = COALESCE(?, error), usage = COALESCE(?, usage)
		WHERE run_id = ? AND status IN (` + placeholders(len(p.From)) + `) RETURNING ` + runCols
	r, err := scanRun(q.queryRow(ctx, true, query, args...))
	if err == nil {
		return r, nil
	}
	if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("run transition %s -> %s: %w", p.RunID, p.Status, err)
	}
	cur, err := scanRun(q.queryRow(ctx, true, `SELECT `+runCols+` FROM runs WHERE run_id = ?`, p.RunID))
	if err != nil {
		return nil, fmt.Errorf("run transition %s: %w", p.RunID, mapErr(q.d, err))
	}
	return cur, fmt.Errorf("run %s is %s, not %s: %w", p.RunID, cur.Status, strings.Join(p.From, "|"), store.ErrConflict)
}

// RunListActive lists non-terminal runs, oldest first.
func (q *queries) RunListActive(ctx context.Context, p *store.RunListActiveParams) ([]*store.Run, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	query := `SELECT ` + runCols + ` FROM runs WHERE ended_at IS NULL`
	var args []any
	if p.Owner != "" {
		query += ` AND owner = ?`
		args = append(args, p.Owner)
	}
	query += ` ORDER BY started_at, run_id LIMIT ?`
	args = append(args, limit)
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	defer rows.Close()
	var out []*store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list active runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
