package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// Pipe runs one write transaction's statements on one connection and sends
// them to the database together where it can: a statement whose result no
// one waits for (Queue) goes with the next one that is waited for, the
// transaction's BEGIN goes with its first statement, and its COMMIT with
// its last queued ones. On PostgreSQL every statement is a round trip to
// the server, and a run's start or end was seven or eight of them in turn
// (issues 10 and 13); pipelined, each waited-for statement is one.
//
// A statement that fails aborts the transaction, as it does without a
// pipe: its error comes back from the call that sent it, which for a
// queued statement is the next Exec, Query or Commit.
type Pipe interface {
	// Queue adds a statement whose result no one reads.
	Queue(query string, args []any)
	// QueueRow adds a statement whose one row is read later: scan is
	// called with it when its batch is read (the next Exec, Query or
	// Commit), and its error is that call's. The statements sent after it
	// in the batch, a COMMIT among them, have run by then whatever scan
	// makes of the row: anything that must fail the transaction has to be
	// an error of the statement itself.
	QueueRow(query string, args []any, scan func(scan func(dest ...any) error) error)
	// Exec sends what is queued and query, and returns query's count of
	// rows affected.
	Exec(ctx context.Context, query string, args []any) (int64, error)
	// Query sends what is queued and query, and returns query's rows; they
	// are closed before the next statement.
	Query(ctx context.Context, query string, args []any) (Rows, error)
	// Commit sends what is queued and commits; nothing is sent when nothing
	// was queued since the BEGIN.
	Commit(ctx context.Context) error
	// Rollback ends the transaction if any of it reached the server.
	Rollback(ctx context.Context) error
	// Group runs fns at the same time, each on a Pipe of its own whose
	// waited-for statements are sent together with the others' (one
	// round trip for all where there were one each); it returns each fn's
	// error. The fns must not depend on each other's writes.
	Group(ctx context.Context, fns []func(Pipe) error) []error
}

// Rows is what reading a result takes, of *sql.Rows or a Pipe's rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Close() error
	Err() error
}

// InTx runs fn in one write transaction, over the dialect's Pipeline: one
// connection of the writer pool, the transaction's statements sent through
// a Pipe. Anything but a successful commit rolls back — an error, and a
// panic too (on SQLite a transaction left open would hold the only writer
// connection forever).
func (db *DB) InTx(ctx context.Context, fn func(tx store.Queries) error) error {
	conn, err := db.write.Conn(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", db.mapErr(err))
	}
	defer conn.Close()
	return db.d.Pipeline(ctx, conn, func(p Pipe) (err error) {
		committed := false
		defer func() {
			if !committed {
				// Best effort: a connection left in a transaction is
				// discarded by the pool (pgx's ResetSession).
				_ = p.Rollback(context.Background())
			}
		}()
		q := &queries{d: db.d, pipe: p, observe: db.observe}
		var tx store.Queries = pipeQueries{q}
		if db.d.PipelineInProcess {
			tx = q
		}
		if err := fn(tx); err != nil {
			return err
		}
		if err := p.Commit(ctx); err != nil {
			return fmt.Errorf("commit: %w", db.mapErr(err))
		}
		committed = true
		return nil
	})
}

// pipeQueries are the Queries of a pipelined transaction: they also run
// independent work at the same time, sharing round trips (store.Parallel).
type pipeQueries struct{ *queries }

// Parallel runs fns at the same time through Pipe.Group; it returns the
// first error in fns' order.
func (q pipeQueries) Parallel(ctx context.Context, fns []func(store.Queries) error) error {
	pfns := make([]func(Pipe) error, len(fns))
	for i, fn := range fns {
		pfns[i] = func(p Pipe) error { return fn(&queries{d: q.d, pipe: p, observe: q.observe}) }
	}
	for _, err := range q.pipe.Group(ctx, pfns) {
		if err != nil {
			return err
		}
	}
	return nil
}

// AssertRunsActive queues the check that runIDs are active
// (store.RunsActiveAsserter): the dialect's RunsActiveStatement, whose
// failure fails the transaction at the next statement waited for or the
// commit. Only where the dialect has such a statement.
func (q pipeQueries) AssertRunsActive(ctx context.Context, runIDs []string) error {
	if q.d.RunsActiveStatement == "" {
		return errors.New("sqlstore: this dialect cannot assert runs active")
	}
	return q.execLater(ctx, q.d.RunsActiveStatement, runIDs)
}

// RunEndQuiet queues the end of a run expected to be quiet
// (store.RunQuietEnder): the dialect's RunEndQuietStatement, whose failure
// fails the transaction at the next statement waited for or the commit.
// Only where the dialect has such a statement.
func (q pipeQueries) RunEndQuiet(ctx context.Context, p *store.RunTransitionParams, sessionID string) error {
	if q.d.RunEndQuietStatement == "" {
		return errors.New("sqlstore: this dialect cannot end a run without reading")
	}
	if len(p.From) == 0 || !store.RunIsTerminal(p.Status) {
		return fmt.Errorf("quiet end of run %s: to %q from %v", p.RunID, p.Status, p.From)
	}
	var question any
	if p.Question != "" {
		question = p.Question
	}
	return q.execLater(ctx, q.d.RunEndQuietStatement, p.RunID, sessionID, p.Status, p.At, jsonArg(p.Error, ""), jsonArg(p.Usage, ""),
		question, jsonArg(p.QuestionDetail, ""), p.From)
}

// AssumeSessionForRun queues the check that a session is as last seen
// (store.SessionAssumer): the dialect's SessionAsSeenStatement, whose
// failure fails the transaction at the next statement waited for or the
// commit. Only where the dialect has such a statement, and for the newest
// run of a session by root-ness and agent (no intention).
func (q pipeQueries) AssumeSessionForRun(ctx context.Context, sessionID, userID string, latest *store.RunLatestParams, runID, status string) error {
	if q.d.SessionAsSeenStatement == "" {
		return errors.New("sqlstore: this dialect cannot assume a session")
	}
	if latest == nil || latest.SessionID != sessionID || latest.IntentionID != "" {
		return fmt.Errorf("assume session %s: newest run by %+v", sessionID, latest)
	}
	return q.execLater(ctx, q.d.SessionAsSeenStatement, sessionID, userID, latest.RootOnly, latest.AgentID, runID, status)
}

// sharesRoundTrips: q's statements go to the database together where
// they can (a pipelined transaction on PostgreSQL). Then sending one whose
// answer may turn out unneeded is cheaper than waiting to know; in
// process (SQLite) it is not.
func (q *queries) sharesRoundTrips() bool { return q.pipe != nil && !q.d.PipelineInProcess }

// pipeResult is a Pipe's Exec result as a sql.Result.
type pipeResult int64

func (r pipeResult) RowsAffected() (int64, error) { return int64(r), nil }
func (r pipeResult) LastInsertId() (int64, error) {
	return 0, errors.New("sqlstore: LastInsertId is not supported")
}

// rowOf reads the first row of a query's rows, as *sql.Row does: no row is
// sql.ErrNoRows; the rows are closed after.
type rowOf struct {
	rs  Rows
	err error
}

func (r *rowOf) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return ScanFirst(r.rs, dest...)
}

// ScanFirst scans the first of rs into dest and closes rs, as *sql.Row
// does: no row is sql.ErrNoRows.
func ScanFirst(rs Rows, dest ...any) error {
	defer rs.Close()
	if !rs.Next() {
		if err := rs.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rs.Scan(dest...); err != nil {
		return err
	}
	return rs.Close()
}

// execLater runs a statement whose result nobody reads and whose only
// failure is the transaction's: inside a pipelined transaction it is
// queued and goes to the database with the next statement that is waited
// for (or the commit), so its error, if any, comes back from there.
// Anywhere else it runs now. Never use it for a statement whose error a
// caller handles and carries on from (a unique violation that means
// "exists", say): the transaction would be aborted by then.
func (q *queries) execLater(ctx context.Context, query string, args ...any) error {
	if q.pipe == nil {
		_, err := q.exec(ctx, query, args...)
		return err
	}
	if q.observe != nil {
		q.observe(q.bind(query))
	}
	q.pipe.Queue(q.bind(query), q.escape(args))
	return nil
}

// rowLater reads the one row of a statement whose result nobody needs
// before the transaction commits (a seq the events get, read back by the
// event log after the commit): inside a pipelined transaction fn is called
// when the row arrives, at the latest by the commit, and the statement goes
// to the database with the next one that is waited for; anywhere else fn
// is called now. fn's error is the transaction's, but what fn finds wrong
// in a row does not stop a COMMIT sent with it (Pipe.QueueRow): the
// statement must fail on the server instead.
func (q *queries) rowLater(ctx context.Context, query string, args []any, fn func(r *row) error) error {
	if q.pipe == nil {
		return fn(q.queryRow(ctx, true, query, args...))
	}
	if q.observe != nil {
		q.observe(q.bind(query))
	}
	q.pipe.QueueRow(q.bind(query), q.escape(args), func(scan func(dest ...any) error) error {
		return fn(&row{r: scanFunc(scan), q: q})
	})
	return nil
}

// scanFunc is a Scan function as a row.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }
