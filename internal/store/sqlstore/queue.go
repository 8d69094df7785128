package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// UserLock serialises one user's run starts across replicas (user_locks).
func (q *queries) UserLock(ctx context.Context, userID string) error { return q.lockUser(ctx, userID) }

// RunAdmissionLock holds the one run_admission row until the transaction
// ends (PostgreSQL): every start or admission under the global cap counts
// under it.
func (q *queries) RunAdmissionLock(ctx context.Context) error {
	if q.d.Name != "postgres" {
		return nil
	}
	var id int
	if err := q.queryRow(ctx, true, `SELECT id FROM run_admission WHERE id = 1 FOR UPDATE`).Scan(&id); err != nil {
		return fmt.Errorf("lock run admission: %w", mapErr(q.d, err))
	}
	return nil
}

// RunUserActiveRoots counts the user's root runs not ended, queued ones
// included.
func (q *queries) RunUserActiveRoots(ctx context.Context, userID, exceptRunID string) (int, error) {
	var n int
	err := q.queryRow(ctx, true, `SELECT COUNT(*) FROM runs WHERE user_id = ? AND ended_at IS NULL AND parent_run_id = '' AND run_id <> ?`,
		userID, exceptRunID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count active runs of %s: %w", userID, mapErr(q.d, err))
	}
	return n, nil
}

// RunQueueCounts counts the root runs running (not ended, not queued) and
// queued.
func (q *queries) RunQueueCounts(ctx context.Context, exceptRunID string) (running, queued int, err error) {
	err = q.queryRow(ctx, true, `SELECT
			COALESCE(SUM(CASE WHEN status <> 'QUEUED' THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN status = 'QUEUED' THEN 1 ELSE 0 END), 0)
		FROM runs WHERE ended_at IS NULL AND parent_run_id = '' AND run_id <> ?`, exceptRunID).Scan(&running, &queued)
	if err != nil {
		return 0, 0, fmt.Errorf("count active runs: %w", mapErr(q.d, err))
	}
	return running, queued, nil
}

// RunEnqueue makes a root run inserted in this transaction QUEUED.
func (q *queries) RunEnqueue(ctx context.Context, runID string, at int64, position int) error {
	res, err := q.exec(ctx, `UPDATE runs SET status = 'QUEUED', queued_at = ?, queue_position = ? WHERE run_id = ? AND status = 'RUNNING' AND parent_run_id = ''`,
		at, position, runID)
	if err != nil {
		return fmt.Errorf("enqueue run %s: %w", runID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("enqueue run %s: not a running root run: %w", runID, store.ErrConflict)
	}
	return nil
}

// RunQueueHead lists up to limit queued runs, first in first.
func (q *queries) RunQueueHead(ctx context.Context, limit int) ([]*store.QueuedRun, error) {
	rows, err := q.query(ctx, `SELECT run_id, session_id, agent_id, user_id, queued_at, COALESCE(queue_position, 0) FROM runs
		WHERE status = 'QUEUED' ORDER BY queued_at, run_id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list the run queue: %w", err)
	}
	defer rows.Close()
	var out []*store.QueuedRun
	for rows.Next() {
		var r store.QueuedRun
		if err := rows.Scan(&r.RunID, &r.SessionID, &r.AgentID, &r.UserID, &r.QueuedAt, &r.Position); err != nil {
			return nil, fmt.Errorf("list the run queue: %w", err)
		}
		out = append(out, &r)
	}
	return out, rows.Err()
}

// RunAdmit is the guarded QUEUED → RUNNING transition; the admitting
// process becomes the owner and the run starts now.
func (q *queries) RunAdmit(ctx context.Context, p *store.RunAdmitParams) (*store.Run, error) {
	r, err := scanRun(q.queryRow(ctx, true, `UPDATE runs SET status = 'RUNNING', owner = ?, started_at = ?, queue_position = NULL
		WHERE run_id = ? AND status = 'QUEUED' RETURNING `+runCols, p.Owner, p.At, p.RunID))
	if err == nil {
		return r, nil
	}
	if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("admit run %s: %w", p.RunID, err)
	}
	cur, err := scanRun(q.queryRow(ctx, true, `SELECT `+runCols+` FROM runs WHERE run_id = ?`, p.RunID))
	if err != nil {
		return nil, fmt.Errorf("admit run %s: %w", p.RunID, mapErr(q.d, err))
	}
	return cur, fmt.Errorf("admit run %s: it is %s: %w", p.RunID, cur.Status, store.ErrConflict)
}

// RunQueuePositionSet records the position a queued run's client was told.
func (q *queries) RunQueuePositionSet(ctx context.Context, runID string, from, to int) (bool, error) {
	res, err := q.exec(ctx, `UPDATE runs SET queue_position = ? WHERE run_id = ? AND status = 'QUEUED' AND COALESCE(queue_position, 0) = ?`, to, runID, from)
	if err != nil {
		return false, fmt.Errorf("queue position of %s: %w", runID, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}
