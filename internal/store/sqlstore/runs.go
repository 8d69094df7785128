package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

const runCols = `run_id, session_id, agent_id, parent_run_id, root_run_id, depth, user_id, status, owner, started_at, ended_at, error, usage, child_key, tool_call_id,
	intention_id, resumes_run_id, question, question_detail`

func scanRun(row interface{ Scan(...any) error }) (*store.Run, error) {
	var r store.Run
	var childKey sql.NullString
	err := row.Scan(&r.RunID, &r.SessionID, &r.AgentID, &r.ParentRunID, &r.RootRunID, &r.Depth, &r.UserID, &r.Status, &r.Owner,
		&r.StartedAt, nullInt{&r.EndedAt}, nullJSON{&r.Error}, nullJSON{&r.Usage}, &childKey, &r.ToolCallID,
		&r.IntentionID, &r.ResumesRunID, &r.Question, nullJSON{&r.QuestionDetail})
	if err != nil {
		return nil, err
	}
	r.ChildKey = childKey.String
	return &r, nil
}

func scanRuns(rows *rows) ([]*store.Run, error) {
	defer rows.Close()
	out := []*store.Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RunInsertOrAbort inserts a RUNNING root run without waiting for the
// database's answer where it can: inside a pipelined transaction
// (PostgreSQL) the INSERT goes with the transaction's next waited-for
// statement or its COMMIT — one round trip fewer on every run's start.
// So a conflict (the session's active root run, or another answer to the
// run it resumes) cannot be a clean answer as in RunInsert: it aborts the
// transaction, and ErrConflict comes back from that later statement or
// the commit (at once, elsewhere). The run returned is the row inserted.
func (q *queries) RunInsertOrAbort(ctx context.Context, p *store.RunInsertParams) (*store.Run, error) {
	if p.ParentRunID != "" || p.ChildKey != "" || p.ToolCallID != "" {
		return nil, fmt.Errorf("insert run %s: RunInsertOrAbort inserts root runs only", p.RunID)
	}
	if err := q.execLater(ctx, `INSERT INTO runs (run_id, session_id, agent_id, parent_run_id, root_run_id, depth, user_id, status, owner, started_at,
			intention_id, resumes_run_id)
		VALUES (?, ?, ?, '', ?, 0, ?, 'RUNNING', ?, ?, ?, ?)`,
		p.RunID, p.SessionID, p.AgentID, p.RunID, p.UserID, p.Owner, p.StartedAt, p.IntentionID, p.ResumesRunID); err != nil {
		return nil, fmt.Errorf("insert run %s: %w", p.RunID, err)
	}
	return &store.Run{RunID: p.RunID, SessionID: p.SessionID, AgentID: p.AgentID, RootRunID: p.RunID, UserID: p.UserID, Status: store.RunRunning,
		Owner: p.Owner, StartedAt: p.StartedAt, IntentionID: p.IntentionID, ResumesRunID: p.ResumesRunID}, nil
}

// RunInsert inserts a RUNNING run. ON CONFLICT DO NOTHING covers the
// primary key, the one-active-root-run-per-session index and the child key
// index, so a busy session or a repeated child is a clean answer rather
// than an aborted transaction. A concurrent inserter of the same child key
// waits for the first to commit and then does nothing, so the SELECT that
// follows sees the winner, which comes back with ErrDuplicate.
func (q *queries) RunInsert(ctx context.Context, p *store.RunInsertParams) (*store.Run, error) {
	root := p.RootRunID
	if root == "" {
		root = p.RunID
	}
	var childKey any
	if p.ChildKey != "" {
		childKey = p.ChildKey
	}
	r, err := scanRun(q.queryRow(ctx, true, `INSERT INTO runs (run_id, session_id, agent_id, parent_run_id, root_run_id, depth, user_id, status, owner, started_at, child_key, tool_call_id,
			intention_id, resumes_run_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, 'RUNNING', ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING `+runCols,
		p.RunID, p.SessionID, p.AgentID, p.ParentRunID, root, p.Depth, p.UserID, p.Owner, p.StartedAt, childKey, p.ToolCallID,
		p.IntentionID, p.ResumesRunID))
	if err == nil {
		return r, nil
	}
	if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("insert run %s: %w", p.RunID, err)
	}
	if p.ChildKey != "" {
		r, err := scanRun(q.queryRow(ctx, true, `SELECT `+runCols+` FROM runs WHERE parent_run_id = ? AND child_key = ?`, p.ParentRunID, p.ChildKey))
		if err == nil {
			return r, fmt.Errorf("insert run: run %s already has a child with key %q (%s): %w", p.ParentRunID, p.ChildKey, r.RunID, store.ErrDuplicate)
		}
		if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("insert run %s: %w", p.RunID, err)
		}
	}
	if p.ResumesRunID != "" {
		var n int
		if err := q.queryRow(ctx, true, `SELECT COUNT(*) FROM runs WHERE resumes_run_id = ? AND resumes_run_id <> ''`, p.ResumesRunID).Scan(&n); err == nil && n > 0 {
			return nil, fmt.Errorf("insert run %s: run %s was already resumed: %w", p.RunID, p.ResumesRunID, store.ErrConflict)
		}
	}
	if p.ParentRunID != "" {
		return nil, fmt.Errorf("insert run %s: id taken: %w", p.RunID, store.ErrConflict)
	}
	return nil, fmt.Errorf("insert run %s: session %s has an active run: %w", p.RunID, p.SessionID, store.ErrConflict)
}

// RunListChildren lists a run's children, oldest first.
func (q *queries) RunListChildren(ctx context.Context, parentRunID string) ([]*store.Run, error) {
	if parentRunID == "" {
		return []*store.Run{}, nil // roots are not anybody's children
	}
	// "parent_run_id <> ''" is runs_parent's condition: without it the
	// partial index cannot be used and every run is scanned.
	rows, err := q.query(ctx, `SELECT `+runCols+` FROM runs WHERE parent_run_id = ? AND parent_run_id <> '' ORDER BY started_at, run_id`, parentRunID)
	if err != nil {
		return nil, fmt.Errorf("list children of run %s: %w", parentRunID, err)
	}
	out, err := scanRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("list children of run %s: %w", parentRunID, err)
	}
	return out, nil
}

// RunListTree lists the runs of one tree, shallowest first.
func (q *queries) RunListTree(ctx context.Context, rootRunID string) ([]*store.Run, error) {
	rows, err := q.query(ctx, `SELECT `+runCols+` FROM runs WHERE root_run_id = ? ORDER BY depth, started_at, run_id`, rootRunID)
	if err != nil {
		return nil, fmt.Errorf("list tree of run %s: %w", rootRunID, err)
	}
	out, err := scanRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("list tree of run %s: %w", rootRunID, err)
	}
	return out, nil
}

// RunLatest returns the newest run of a session matching p's filters.
func (q *queries) RunLatest(ctx context.Context, p *store.RunLatestParams) (*store.Run, error) {
	cond, orderBy, args := q.inSession(p.SessionID, "DESC")
	query := `SELECT ` + runCols + ` FROM runs WHERE ` + cond
	if p.RootOnly {
		query += ` AND parent_run_id = ''`
	}
	if p.AgentID != "" {
		query += ` AND agent_id = ?`
		args = append(args, p.AgentID)
	}
	if p.IntentionID != "" {
		query += ` AND intention_id = ?`
		args = append(args, p.IntentionID)
	}
	query += ` ORDER BY ` + orderBy + `started_at DESC, run_id DESC LIMIT 1`
	r, err := scanRun(q.queryRow(ctx, false, query, args...))
	if err != nil {
		return nil, fmt.Errorf("latest run of session %s: %w", p.SessionID, mapErr(q.d, err))
	}
	return r, nil
}

// RunListIntention lists an intention's runs, oldest first.
func (q *queries) RunListIntention(ctx context.Context, intentionID string) ([]*store.Run, error) {
	if intentionID == "" {
		return []*store.Run{}, nil
	}
	// "intention_id <> ''" is runs_intention's condition: without it the
	// partial index cannot be used and every run is scanned.
	rows, err := q.query(ctx, `SELECT `+runCols+` FROM runs WHERE intention_id = ? AND intention_id <> '' ORDER BY started_at, run_id`, intentionID)
	if err != nil {
		return nil, fmt.Errorf("list runs of intention %s: %w", intentionID, err)
	}
	out, err := scanRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("list runs of intention %s: %w", intentionID, err)
	}
	return out, nil
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
	memo := q.memo(ctx)
	if memo != nil {
		runIDs = memo.unknownRuns(runIDs)
	}
	if len(runIDs) == 0 {
		return nil, nil
	}
	query := `SELECT run_id, status FROM runs WHERE run_id IN (` + placeholders(len(runIDs)) + `)`
	if q.d.Name == "postgres" {
		// Every asked run's row is share-locked, ended or not: FOR SHARE
		// locks the rows the query returns, so no filter here.
		query += ` FOR SHARE`
	} else if memo == nil {
		// Only the ended ones come back: the event log asks once per
		// commit about the runs of its stream deltas, which have almost
		// always not ended, and each row returned cost scanning two
		// strings (issue 13). SQLite's single writer needs no lock. With
		// the writer's memo the active ones come back too, to be
		// remembered and not asked about again.
		query += ` AND status IN ` + terminalStatuses
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
	var ended map[string]bool
	var id, status string
	for rows.Next() {
		if err := rows.Scan(&id, &status); err != nil {
			return nil, fmt.Errorf("runs ended: %w", err)
		}
		if !store.RunIsTerminal(status) {
			if memo != nil {
				memo.readActive(id)
			}
			continue
		}
		if ended == nil {
			ended = map[string]bool{}
		}
		ended[id] = true
	}
	return ended, rows.Err()
}

// terminalStatuses is store.RunTerminalStatuses as an SQL list.
var terminalStatuses = `('` + strings.Join(store.RunTerminalStatuses, `', '`) + `')`

// RunTransition is the guarded state change: it updates only when the run
// is in one of p.From. On no match it returns the current row and
// ErrConflict, so the caller can answer 409 or treat it as already done.
func (q *queries) RunTransition(ctx context.Context, p *store.RunTransitionParams) (*store.Run, error) {
	query, args, err := runTransitionStatement(p)
	if err != nil {
		return nil, err
	}
	r, err := scanRun(q.queryRow(ctx, true, query, args...))
	return q.runTransitioned(ctx, p, r, err)
}

// RunEndTransition is RunTransition followed by RunEndOutlook of the
// run: inside a pipelined transaction the two statements go to the
// database together (the outlook is a read, harmless when the transition
// does not happen), a round trip less on every run's end.
func (q *queries) RunEndTransition(ctx context.Context, p *store.RunTransitionParams, sessionID string) (*store.Run, *store.RunOutlook, error) {
	if !q.sharesRoundTrips() {
		r, err := q.RunTransition(ctx, p)
		if err != nil {
			return r, nil, err
		}
		look, err := q.RunEndOutlook(ctx, r)
		return r, look, err
	}
	query, args, err := runTransitionStatement(p)
	if err != nil {
		return nil, nil, err
	}
	var r *store.Run
	var terr error
	if err := q.rowLater(ctx, query, args, func(row *row) error {
		r, terr = scanRun(row)
		return nil // judged below, after the outlook's answer
	}); err != nil {
		return nil, nil, err
	}
	look, lerr := q.runOutlook(ctx, p.RunID, sessionID)
	if r, terr = q.runTransitioned(ctx, p, r, terr); terr != nil {
		return r, nil, terr
	}
	if lerr != nil {
		return nil, nil, lerr
	}
	return r, look, nil
}

// runTransitionStatement is the UPDATE of RunTransition.
func runTransitionStatement(p *store.RunTransitionParams) (string, []any, error) {
	if len(p.From) == 0 {
		return "", nil, fmt.Errorf("run transition %s: empty From", p.RunID)
	}
	var endedAt any
	if store.RunIsTerminal(p.Status) {
		endedAt = p.At
	}
	var question any
	if p.Question != "" {
		question = p.Question
	}
	args := []any{p.Status, endedAt, jsonArg(p.Error, ""), jsonArg(p.Usage, ""), question, jsonArg(p.QuestionDetail, ""), p.RunID}
	for _, s := range p.From {
		args = append(args, s)
	}
	query := `UPDATE runs SET status = ?, ended_at = ?, error = COALESCE(?, error), usage = COALESCE(?, usage),
		question = COALESCE(?, question), question_detail = COALESCE(?, question_detail)
		WHERE run_id = ? AND status IN (` + placeholders(len(p.From)) + `) RETURNING ` + runCols
	return query, args, nil
}

// runTransitioned judges the UPDATE's answer r, err: no row is the
// current row and ErrConflict.
func (q *queries) runTransitioned(ctx context.Context, p *store.RunTransitionParams, r *store.Run, err error) (*store.Run, error) {
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

// RunEndOutlook reads, in one statement, whether run has children, tool
// calls not ended and LLM calls. Each condition is the one its index is
// partial on (runs_parent, events_run), so the index is used.
func (q *queries) RunEndOutlook(ctx context.Context, run *store.Run) (*store.RunOutlook, error) {
	return q.runOutlook(ctx, run.RunID, run.SessionID)
}

func (q *queries) runOutlook(ctx context.Context, runID, sessionID string) (*store.RunOutlook, error) {
	var o store.RunOutlook
	err := q.queryRow(ctx, true, `SELECT
		EXISTS (SELECT 1 FROM runs WHERE parent_run_id = ? AND parent_run_id <> ''),
		EXISTS (SELECT 1 FROM tool_calls WHERE run_id = ? AND ended_at IS NULL),
		EXISTS (SELECT 1 FROM events WHERE run_id = ? AND type NOT IN ('agent_stream_delta', 'sub_agent_partial') AND type = 'llm_call_done' AND session_id = ?)`,
		runID, runID, runID, sessionID).Scan(&o.Children, &o.OpenToolCalls, &o.LLMCalls)
	if err != nil {
		return nil, fmt.Errorf("outlook of run %s: %w", runID, mapErr(q.d, err))
	}
	return &o, nil
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
	out, err := scanRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	return out, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
