// Package sqlstore implements store.Store over database/sql for both SQLite
// and PostgreSQL. Queries are written once with "?" placeholders; the Dialect
// rebinds them and maps driver errors to the store sentinels.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

// Dialect holds what differs between databases.
type Dialect struct {
	// Name is "sqlite" or "postgres".
	Name string
	// Numbered placeholders ($1, $2 …) instead of "?".
	Numbered bool
	// IsUniqueViolation reports a unique/primary-key constraint error.
	IsUniqueViolation func(error) bool
	// FailedCheck returns the store error a check statement sent without
	// waiting fails with — store.ErrRunEnded (RunsActiveStatement),
	// store.ErrRunNotQuiet (RunEndQuietStatement), store.ErrSessionMoved
	// (SessionAsSeenStatement) — and nil for any other error (nil: the
	// dialect has no such statements).
	FailedCheck func(error) error
	// IsNotNullViolation reports a NOT NULL constraint error (nil: the
	// store's statements never rely on one).
	IsNotNullViolation func(error) bool
	// IsUnavailable reports an error that says the database cannot be
	// reached or cannot take work now (connection refused or lost, server
	// shutting down, too many connections): callers should retry later.
	IsUnavailable func(error) bool
	// EscapeText: the database's text refuses NUL bytes and invalid UTF-8,
	// so strings go through the text codec (text.go).
	EscapeText bool
	// PrepareStatements: keep hot statements prepared (stmtcache.go), for
	// a driver that does not cache them itself.
	PrepareStatements bool
	// Pipeline runs each write transaction (InTx) on conn, one connection
	// of the writer pool, through a Pipe it hands fn (pipeline.go): the
	// driver's own, not database/sql's transactions.
	Pipeline func(ctx context.Context, conn *sql.Conn, fn func(Pipe) error) error
	// PipelineInProcess: Pipeline's Pipe runs each statement at once, in
	// process (SQLite), so there are no round trips to share: its
	// transactions get the plain Queries — nothing run alongside
	// (store.Parallel), no check sent without waiting for it.
	PipelineInProcess bool
	// RunsActiveStatement, with a pipeline, is the statement that checks
	// runs (its one argument, a list of ids) are active and fails with an
	// error FailedCheck knows when one has ended (pipeQueries.AssertRunsActive).
	RunsActiveStatement string
	// RunEndQuietStatement, with a pipeline, ends a run expected to be
	// quiet (pipeQueries.RunEndQuiet): its arguments are the run, its
	// session, the status, ended_at, error, usage, question,
	// question_detail and the statuses it may end from; it fails (see
	// FailedCheck) when the run was not active or not quiet.
	RunEndQuietStatement string
	// SessionAsSeenStatement, with a pipeline, checks a session is as a
	// process last saw it (pipeQueries.AssumeSessionForRun): its arguments
	// are the session, its user, whether the newest run is a root's, the
	// agent it is of ("" any), and its id and status; it fails (see
	// FailedCheck) when the session is not as seen.
	SessionAsSeenStatement string
}

// DB is a store.Store. Writes go to write, reads to read; for SQLite those
// are different pools (one writer connection, several readers), for
// PostgreSQL the same pool.
type DB struct {
	*queries
	d       *Dialect
	write   *sql.DB
	read    *sql.DB
	closers []func() // background work of the driver, stopped before the pools close
}

// OnClose registers fn to run (once) when the store closes, before its
// connections do.
func (db *DB) OnClose(fn func()) { db.closers = append(db.closers, fn) }

// New wraps open pools. read may equal write.
func New(d *Dialect, write, read *sql.DB) *DB {
	q := &queries{d: d, w: write, r: read}
	if d.PrepareStatements {
		q.wc = newStmtCache(write)
		q.rc = q.wc
		if read != write {
			q.rc = newStmtCache(read)
		}
	}
	return &DB{queries: q, d: d, write: write, read: read}
}

// SQL is the writer pool, for tests that inspect tables directly (row
// counts per table) — never for the platform's own work.
func (db *DB) SQL() *sql.DB { return db.write }

// Dialect reports the database kind.
func (db *DB) Dialect() string { return db.d.Name }

// Ping checks both pools answer.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.write.PingContext(ctx); err != nil {
		return fmt.Errorf("ping: %w", db.mapErr(err))
	}
	if db.read != db.write {
		if err := db.read.PingContext(ctx); err != nil {
			return fmt.Errorf("ping: %w", db.mapErr(err))
		}
	}
	return nil
}

// Close stops the driver's background work and closes the pools.
func (db *DB) Close() error {
	for _, fn := range db.closers {
		fn()
	}
	db.closers = nil
	if db.wc != nil {
		db.wc.close()
		db.rc.close()
	}
	err := db.write.Close()
	if db.read != db.write {
		err = errors.Join(err, db.read.Close())
	}
	return err
}

func (db *DB) mapErr(err error) error { return mapErr(db.d, err) }

// EventsAppend outside a caller's transaction still needs one: the seq bump
// and the insert must commit together.
func (db *DB) EventsAppend(ctx context.Context, events []store.EventParams) (out []store.Event, err error) {
	err = db.InTx(ctx, func(tx store.Queries) error {
		out, err = tx.EventsAppend(ctx, events)
		return err
	})
	return out, err
}

// EventsAppendNotify outside a caller's transaction runs in one of its own,
// for the same reason.
func (db *DB) EventsAppendNotify(ctx context.Context, events []store.EventParams, origin string, sessionIDs []string) (out []store.Event, err error) {
	err = db.InTx(ctx, func(tx store.Queries) error {
		out, err = tx.EventsAppendNotify(ctx, events, origin, sessionIDs)
		return err
	})
	return out, err
}

// queries runs statements on the writer and reader pools, or inside InTx
// on its transaction's Pipe.
type queries struct {
	d *Dialect
	w *sql.DB
	r *sql.DB
	// Prepared statements of the writer and reader pools (nil: none).
	wc, rc *stmtCache
	// pipe, when set, is a transaction (pipeline.go) that every statement
	// goes through; w and r are then nil.
	pipe Pipe
	// observe, when set (tests only: ObserveQueries), is told every
	// statement's text before it runs.
	observe func(query string)
}

// ObserveQueries has fn told the text of every statement the store runs
// from now on, inside transactions too, as sent to the database (bind).
// It is a test seam: the query-plan audit (testdb.AuditQueryPlans) collects the statements a test suite runs
// and checks none of them scans a table that grows. Set it before the
// store is used.
func (db *DB) ObserveQueries(fn func(query string)) { db.observe = fn }

// prepared returns query as a prepared statement for the writer (write)
// or reader pool, or nil to run it unprepared.
func (q *queries) prepared(ctx context.Context, write bool, query string) *sql.Stmt {
	c := q.rc
	if write {
		c = q.wc
	}
	if c == nil {
		return nil
	}
	return c.get(ctx, q.bind(query))
}

var rebound texts[string] // query text -> numbered form

// sqliteParams keeps SQLite from re-planning prepared statements. Since
// 3.47 its planner reads the bound value of a bare parameter in two
// places — a LIMIT, and an equality it compares with a partial index's
// condition (type = ? against events_llm_done's type = 'llm_call_done',
// parent_run_id = ? against the active-root indexes' parent_run_id = ”) —
// and a statement that did so is parsed and planned again after every new
// binding of that parameter: every prepared listing (a run's transcript, a
// session's events) and a run end's read of its LLM calls, on every call
// (9 % of the server's CPU in the A2A benchmark). A unary plus is the same
// value but not a bare parameter, so the plan is kept. PostgreSQL would
// type "+$n" as a number, so it keeps the plain form.
var sqliteParams = strings.NewReplacer("LIMIT ?", "LIMIT +?", "type = ?", "type = +?", "parent_run_id = ?", "parent_run_id = +?")

var sqliteBound texts[string] // query text -> SQLite form

// inSession is the condition, its arguments and the ORDER BY prefix (in
// direction dir, "ASC" or "DESC") of a statement that wants a session's
// rows in an order, walked from the newest or the oldest. On
// PostgreSQL the session is a range, ordered by first: with
// session_id = ?, PostgreSQL drops the constant from the order and may
// walk an index of the order alone (runs_started, the messages' primary
// key) backward, filtering by session — for a session whose rows are older
// than the rest of the table, every newer row: 17–31 ms at 200,000 rows,
// growing with the table, where the session's index answers in
// microseconds. A range is not a constant, so only the session's index
// gives the order. SQLite keeps the equality: it has no incremental sort,
// and the range made it sort all of a session's runs on every run start.
func (q *queries) inSession(sessionID, dir string) (cond, orderBy string, args []any) {
	if q.d.Name == "postgres" {
		return `session_id >= ? AND session_id <= ?`, `session_id ` + dir + `, `, []any{sessionID, sessionID}
	}
	return `session_id = ?`, ``, []any{sessionID}
}

// bind turns "?" placeholders into $n for PostgreSQL, and rewrites a few of
// them for SQLite (sqliteParams). Queries are constants, so the result is
// cached.
func (q *queries) bind(query string) string {
	if !q.d.Numbered {
		return sqliteBound.get(query, sqliteParams.Replace)
	}
	return rebound.get(query, numberParams)
}

// numberParams numbers query's "?" placeholders $1, $2, ….
func numberParams(query string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// Every statement goes through exec, queryRow, query or queryWrite: they
// bind placeholders, escape string arguments for the dialect, and hand back
// rows whose Scan unescapes strings and maps errors to the sentinels.

func (q *queries) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if q.observe != nil {
		q.observe(q.bind(query))
	}
	if q.pipe != nil {
		n, err := q.pipe.Exec(ctx, q.bind(query), q.escape(args))
		return pipeResult(n), mapErr(q.d, err)
	}
	if s := q.prepared(ctx, true, query); s != nil {
		res, err := s.ExecContext(ctx, q.escape(args)...)
		return res, mapErr(q.d, err)
	}
	res, err := q.w.ExecContext(ctx, q.bind(query), q.escape(args)...)
	return res, mapErr(q.d, err)
}

func (q *queries) queryRow(ctx context.Context, write bool, query string, args ...any) *row {
	if q.observe != nil {
		q.observe(q.bind(query))
	}
	if q.pipe != nil {
		rs, err := q.pipe.Query(ctx, q.bind(query), q.escape(args))
		return &row{r: &rowOf{rs: rs, err: err}, q: q}
	}
	if s := q.prepared(ctx, write, query); s != nil {
		return &row{r: s.QueryRowContext(ctx, q.escape(args)...), q: q}
	}
	db := q.r
	if write {
		db = q.w
	}
	return &row{r: db.QueryRowContext(ctx, q.bind(query), q.escape(args)...), q: q}
}

func (q *queries) query(ctx context.Context, query string, args ...any) (*rows, error) {
	return q.queryOn(ctx, false, query, args)
}

// queryWrite is query on the writer (inside a transaction: the statement
// takes locks or changes rows).
func (q *queries) queryWrite(ctx context.Context, query string, args ...any) (*rows, error) {
	return q.queryOn(ctx, true, query, args)
}

func (q *queries) queryOn(ctx context.Context, write bool, query string, args []any) (*rows, error) {
	if q.observe != nil {
		q.observe(q.bind(query))
	}
	var rs Rows
	var err error
	if q.pipe != nil {
		rs, err = q.pipe.Query(ctx, q.bind(query), q.escape(args))
	} else if s := q.prepared(ctx, write, query); s != nil {
		rs, err = s.QueryContext(ctx, q.escape(args)...)
	} else if write {
		rs, err = q.w.QueryContext(ctx, q.bind(query), q.escape(args)...)
	} else {
		rs, err = q.r.QueryContext(ctx, q.bind(query), q.escape(args)...)
	}
	if err != nil {
		return nil, mapErr(q.d, err)
	}
	return &rows{rs: rs, q: q}, nil
}

// escape applies the text codec to string arguments (a copy of args, only
// when one changes).
func (q *queries) escape(args []any) []any {
	if !q.d.EscapeText {
		return args
	}
	var out []any
	for i, a := range args {
		s, ok := a.(string)
		if !ok || !needsEscape(s) {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = escapeText(s)
	}
	if out == nil {
		return args
	}
	return out
}

// unescape reverses escape on scanned values.
func (q *queries) unescape(dest []any) {
	if !q.d.EscapeText {
		return
	}
	for _, d := range dest {
		switch v := d.(type) {
		case *string:
			*v = unescapeText(*v)
		case nullJSON:
			if *v.b != nil {
				*v.b = unescapeJSON(*v.b)
			}
		}
	}
}

// row is a *sql.Row (or a pipe's first row) whose Scan unescapes and maps
// errors.
type row struct {
	r interface{ Scan(dest ...any) error }
	q *queries
}

func (r *row) Scan(dest ...any) error {
	if err := r.r.Scan(dest...); err != nil {
		return mapErr(r.q.d, err)
	}
	r.q.unescape(dest)
	return nil
}

// rows is *sql.Rows (or a pipe's rows) whose Scan unescapes and whose
// errors are mapped.
type rows struct {
	rs Rows
	q  *queries
}

func (r *rows) Next() bool { return r.rs.Next() }

func (r *rows) Close() error { return mapErr(r.q.d, r.rs.Close()) }

func (r *rows) Scan(dest ...any) error {
	if err := r.rs.Scan(dest...); err != nil {
		return mapErr(r.q.d, err)
	}
	r.q.unescape(dest)
	return nil
}

func (r *rows) Err() error { return mapErr(r.q.d, r.rs.Err()) }

// mapErr maps driver errors to store sentinels, keeping the original text.
// It is idempotent: an error already mapped comes back unchanged.
func mapErr(d *Dialect, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrUnavailable):
		return err
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case d.IsUniqueViolation(err):
		return fmt.Errorf("%w: %v", store.ErrConflict, err)
	case d.FailedCheck != nil && d.FailedCheck(err) != nil:
		return fmt.Errorf("%w: %v", d.FailedCheck(err), err)
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, driver.ErrBadConn), d.IsUnavailable != nil && d.IsUnavailable(err):
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// jsonArg passes JSON to the driver as a string (JSON columns are text on
// both databases, and a string goes through the text codec), and an empty
// value must become SQL NULL or the column default's equivalent.
func jsonArg(b []byte, empty string) any {
	if len(b) == 0 {
		if empty == "" {
			return nil
		}
		return empty
	}
	return string(b)
}

// nullJSON scans a nullable JSON column (unescaped by row and rows).
type nullJSON struct{ b *json.RawMessage }

func (n nullJSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n.b = nil
	case string:
		*n.b = json.RawMessage(v)
	case []byte:
		*n.b = append([]byte(nil), v...)
	default:
		return fmt.Errorf("unexpected JSON column type %T", src)
	}
	return nil
}

// nullInt scans a nullable integer column into an int64 (0 for NULL).
type nullInt struct{ v *int64 }

func (n nullInt) Scan(src any) error {
	var x sql.NullInt64
	if err := x.Scan(src); err != nil {
		return err
	}
	*n.v = x.Int64
	return nil
}
