package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// SessionListByAge pages through sessions created before p.Before, oldest
// first.
func (q *queries) SessionListByAge(ctx context.Context, p *store.SessionListByAgeParams) ([]*store.Session, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := q.query(ctx, `SELECT `+q.sessionCols()+` FROM sessions s WHERE s.created_at < ? AND (s.created_at > ? OR (s.created_at = ? AND s.session_id > ?))
		ORDER BY s.created_at, s.session_id LIMIT ?`, p.Before, p.AfterCreated, p.AfterCreated, p.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list sessions by age: %w", err)
	}
	defer rows.Close()
	var out []*store.Session
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list sessions by age: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// SessionActivityGet reads what retention decides on.
func (q *queries) SessionActivityGet(ctx context.Context, sessionID string) (*store.SessionActivity, error) {
	var a store.SessionActivity
	var active, lastStart, lastEnd, lastEvent int64
	err := q.queryRow(ctx, true, `SELECT s.session_id, s.created_at,
			(SELECT COUNT(*) FROM runs r WHERE r.session_id = s.session_id AND r.ended_at IS NULL),
			COALESCE((SELECT MAX(r.started_at) FROM runs r WHERE r.session_id = s.session_id), 0),
			COALESCE((SELECT MAX(r.ended_at) FROM runs r WHERE r.session_id = s.session_id), 0),
			COALESCE((SELECT e.ts FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), 0)
		FROM sessions s WHERE s.session_id = ?`, sessionID).Scan(&a.SessionID, &a.CreatedAt, &active, &lastStart, &lastEnd, &lastEvent)
	if err != nil {
		return nil, fmt.Errorf("session %s activity: %w", sessionID, mapErr(q.d, err))
	}
	a.Active = active > 0
	a.LastActivity = max(a.CreatedAt, lastStart, lastEnd, lastEvent)
	rows, err := q.queryWrite(ctx, `SELECT DISTINCT agent_id FROM runs WHERE session_id = ? ORDER BY agent_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("session %s agents: %w", sessionID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("session %s agents: %w", sessionID, err)
		}
		a.Agents = append(a.Agents, id)
	}
	return &a, rows.Err()
}

// lockSession reads a session holding its row until the transaction ends
// (PostgreSQL; SQLite's one writer serialises anyway).
func (q *queries) lockSession(ctx context.Context, sessionID string) error {
	query := `SELECT session_id FROM sessions WHERE session_id = ?`
	if q.d.Name == "postgres" {
		query += ` FOR UPDATE`
	}
	var id string
	if err := q.queryRow(ctx, true, query, sessionID).Scan(&id); err != nil {
		return fmt.Errorf("lock session %s: %w", sessionID, mapErr(q.d, err))
	}
	return nil
}

// SessionPurgeBegin outside a caller's transaction runs in one.
func (db *DB) SessionPurgeBegin(ctx context.Context, p *store.SessionPurgeBeginParams) error {
	return db.InTx(ctx, func(tx store.Queries) error { return tx.SessionPurgeBegin(ctx, p) })
}

// SessionPurgeBegin records the decision to delete a session that has no
// active run (and, with IdleBefore, no activity since), under the
// session's row lock: a run's start takes the same lock (SessionPurging),
// so either the start commits first and the purge sees its run, or the
// purge commits first and the start sees the purge.
func (q *queries) SessionPurgeBegin(ctx context.Context, p *store.SessionPurgeBeginParams) error {
	if err := q.lockSession(ctx, p.SessionID); err != nil {
		return err
	}
	a, err := q.SessionActivityGet(ctx, p.SessionID)
	if err != nil {
		return err
	}
	if a.Active {
		return fmt.Errorf("purge session %s: it has an active run: %w", p.SessionID, store.ErrConflict)
	}
	if p.IdleBefore > 0 && a.LastActivity >= p.IdleBefore {
		return fmt.Errorf("purge session %s: active since the cutoff: %w", p.SessionID, store.ErrConflict)
	}
	res, err := q.exec(ctx, `INSERT INTO session_purges (session_id, owner, started_at, reason) VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING`,
		p.SessionID, p.Owner, p.At, p.Reason)
	if err != nil {
		return fmt.Errorf("purge session %s: %w", p.SessionID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("purge session %s: already being purged: %w", p.SessionID, store.ErrConflict)
	}
	return nil
}

// purgeTables are a session's tables in the order their rows go (a
// table's rows before the rows they reference), with their key column.
// session_clients is not among them: its rows say which live connections
// follow the session, and go when those connections do.
var purgeTables = []struct{ table, key string }{
	{"approvals", "approval_id"},
	{"tool_calls", "tool_call_id"},
	{"events", "event_id"},
	{"messages", "message_id"},
	{"runs", "run_id"},
}

// SessionPurgeBatch deletes up to limit rows of the first of the session's
// tables that still has some, in one statement (its own transaction).
func (q *queries) SessionPurgeBatch(ctx context.Context, sessionID string, limit int) (store.SessionPurgeCounts, bool, error) {
	if limit <= 0 {
		limit = 500
	}
	for _, t := range purgeTables {
		res, err := q.exec(ctx, `DELETE FROM `+t.table+` WHERE session_id = ? AND `+t.key+` IN (SELECT `+t.key+` FROM `+t.table+` WHERE session_id = ? LIMIT ?)`,
			sessionID, sessionID, limit)
		if err != nil {
			return nil, false, fmt.Errorf("purge session %s %s: %w", sessionID, t.table, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return store.SessionPurgeCounts{t.table: n}, false, nil
		}
	}
	return store.SessionPurgeCounts{}, true, nil
}

// SessionPurgeFinish deletes the session row and leaves the purge record as
// its tombstone.
func (q *queries) SessionPurgeFinish(ctx context.Context, sessionID string, at int64) error {
	if _, err := q.exec(ctx, `DELETE FROM sessions WHERE session_id = ?`, sessionID); err != nil {
		return fmt.Errorf("purge session %s: %w", sessionID, err)
	}
	if _, err := q.exec(ctx, `UPDATE session_purges SET done_at = ? WHERE session_id = ?`, at, sessionID); err != nil {
		return fmt.Errorf("purge session %s: %w", sessionID, err)
	}
	return nil
}

// SessionTombstonesPrune forgets deleted sessions' ids deleted before
// before: they may be used again.
func (q *queries) SessionTombstonesPrune(ctx context.Context, before int64) (int, error) {
	res, err := q.exec(ctx, `DELETE FROM session_purges WHERE done_at IS NOT NULL AND done_at < ?`, before)
	if err != nil {
		return 0, fmt.Errorf("prune session tombstones: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// SessionPurging reports whether the session is being deleted or was
// deleted (its id is a tombstone), locking the session's row (PostgreSQL)
// so a purge cannot be decided meanwhile.
func (q *queries) SessionPurging(ctx context.Context, sessionID string) (bool, error) {
	if q.d.Name == "postgres" {
		var id string
		err := q.queryRow(ctx, true, `SELECT session_id FROM sessions WHERE session_id = ? FOR UPDATE`, sessionID).Scan(&id)
		if err = mapErr(q.d, err); err != nil && !isNotFound(err) {
			return false, fmt.Errorf("session %s purging: %w", sessionID, err)
		}
	}
	var n int64
	if err := q.queryRow(ctx, true, `SELECT COUNT(*) FROM session_purges WHERE session_id = ?`, sessionID).Scan(&n); err != nil {
		return false, fmt.Errorf("session %s purging: %w", sessionID, mapErr(q.d, err))
	}
	return n > 0, nil
}

// SessionGetForRun reads the session with its purge count in one statement,
// locking the row on PostgreSQL as SessionPurging does (issue 13: one round
// trip where a run's start took three).
func (q *queries) SessionGetForRun(ctx context.Context, sessionID string) (*store.Session, bool, error) {
	var purges int64
	sess, err := scanSession(scanThen{q.queryRow(ctx, true, q.sessionForRunQuery(), sessionID), []any{&purges}})
	if err != nil {
		return nil, false, fmt.Errorf("get session %s: %w", sessionID, mapErr(q.d, err))
	}
	return sess, purges > 0, nil
}

// sessionForRunQuery reads a session with its purge count, locking its row
// on PostgreSQL.
func (q *queries) sessionForRunQuery() string {
	query := `SELECT ` + q.sessionCols() + `,
		(SELECT COUNT(*) FROM session_purges p WHERE p.session_id = s.session_id) FROM sessions s WHERE s.session_id = ?`
	if q.d.Name == "postgres" {
		query += ` FOR UPDATE OF s`
	}
	return query
}

// SessionGetForRunLatest is SessionGetForRun, then RunLatest(latest) read
// after the session's lock is taken — its own statement, so it sees what a
// run start that held the lock before committed — sent together with it
// inside a pipelined transaction: a run's start reads both in one round
// trip. The run is nil when the session has none matching, or latest is
// nil (SessionGetForRun alone).
func (q *queries) SessionGetForRunLatest(ctx context.Context, sessionID string, latest *store.RunLatestParams) (*store.Session, bool, *store.Run, error) {
	if latest == nil {
		sess, purging, err := q.SessionGetForRun(ctx, sessionID)
		return sess, purging, nil, err
	}
	// Outside a pipelined transaction rowLater reads the session at once.
	var purges int64
	var sess *store.Session
	var serr error
	if err := q.rowLater(ctx, q.sessionForRunQuery(), []any{sessionID}, func(r *row) error {
		sess, serr = scanSession(scanThen{r, []any{&purges}})
		return nil // judged below: the read after it is harmless either way
	}); err != nil {
		return nil, false, nil, err
	}
	r, lerr := q.RunLatest(ctx, latest)
	if serr != nil {
		return nil, false, nil, fmt.Errorf("get session %s: %w", sessionID, mapErr(q.d, serr))
	}
	if errors.Is(lerr, store.ErrNotFound) {
		return sess, purges > 0, nil, nil
	}
	if lerr != nil {
		return nil, false, nil, lerr
	}
	return sess, purges > 0, r, nil
}

// scanThen scans a row whose leading columns a scanX function reads into
// those and then into tail (the columns a query adds after them).
type scanThen struct {
	row  interface{ Scan(...any) error }
	tail []any
}

func (s scanThen) Scan(dest ...any) error { return s.row.Scan(append(dest, s.tail...)...) }

// SessionPurgesStale lists purges not touched since staleBefore.
func (q *queries) SessionPurgesStale(ctx context.Context, staleBefore int64, limit int) ([]*store.SessionPurge, error) {
	rows, err := q.query(ctx, `SELECT session_id, owner, started_at, reason FROM session_purges WHERE done_at IS NULL AND started_at < ? ORDER BY started_at LIMIT ?`, staleBefore, limit)
	if err != nil {
		return nil, fmt.Errorf("list stale purges: %w", err)
	}
	defer rows.Close()
	var out []*store.SessionPurge
	for rows.Next() {
		var p store.SessionPurge
		if err := rows.Scan(&p.SessionID, &p.Owner, &p.StartedAt, &p.Reason); err != nil {
			return nil, fmt.Errorf("list stale purges: %w", err)
		}
		out = append(out, &p)
	}
	return out, rows.Err()
}

// SessionPurgeClaim takes over a purge still exactly as cur was read.
func (q *queries) SessionPurgeClaim(ctx context.Context, cur *store.SessionPurge, owner string, at int64) error {
	res, err := q.exec(ctx, `UPDATE session_purges SET owner = ?, started_at = ? WHERE session_id = ? AND owner = ? AND started_at = ? AND done_at IS NULL`,
		owner, at, cur.SessionID, cur.Owner, cur.StartedAt)
	if err != nil {
		return fmt.Errorf("claim purge of %s: %w", cur.SessionID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("claim purge of %s: %w", cur.SessionID, store.ErrConflict)
	}
	return nil
}

// EventsDeleteBefore deletes the oldest events of a session while their ts
// is before ts, at most limit: a prefix, so the rest stays gap-free.
//
// On SQLite the session's last seq is the events' highest (sqliteLastSeq),
// so its floor is raised to that first: deleting every event must not let
// the seqs start over. A commit in between only adds events above it.
func (q *queries) EventsDeleteBefore(ctx context.Context, sessionID string, ts int64, limit int) (int, error) {
	if q.d.Name == "sqlite" {
		if _, err := q.exec(ctx, `UPDATE sessions AS s SET last_seq = `+sqliteLastSeq+` WHERE s.session_id = ?`, sessionID); err != nil {
			return 0, fmt.Errorf("delete old events of %s: keep the last seq: %w", sessionID, err)
		}
	}
	res, err := q.exec(ctx, `WITH head AS (SELECT seq, ts FROM events WHERE session_id = ? ORDER BY seq LIMIT ?)
		DELETE FROM events WHERE session_id = ? AND seq <= COALESCE((SELECT MIN(seq) - 1 FROM head WHERE ts >= ?), (SELECT MAX(seq) FROM head))`,
		sessionID, limit, sessionID, ts)
	if err != nil {
		return 0, fmt.Errorf("delete old events of %s: %w", sessionID, err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// SessionActiveRuns lists the session's runs that have not ended.
func (q *queries) SessionActiveRuns(ctx context.Context, sessionID string) ([]*store.Run, error) {
	rows, err := q.query(ctx, `SELECT `+runCols+` FROM runs WHERE session_id = ? AND ended_at IS NULL ORDER BY started_at, run_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("active runs of %s: %w", sessionID, err)
	}
	defer rows.Close()
	var out []*store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("active runs of %s: %w", sessionID, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
