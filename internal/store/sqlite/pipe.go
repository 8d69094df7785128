package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

// maxDirectStmts bounds the statements a writer connection keeps prepared
// for its transactions; past it, new texts run unprepared. The store's
// texts are constants or of a few shapes (sqlstore.shapeChunks), far
// fewer.
const maxDirectStmts = 512

// direct runs the store's write transactions on the writer's connection
// through the driver itself instead of database/sql (issue 13). Per
// transaction database/sql starts a goroutine that waits for the
// context's end, wraps that context so the driver starts one more each
// for BEGIN and COMMIT to interrupt them, parses BEGIN and COMMIT anew,
// and wraps every statement of it in a *sql.Stmt of the transaction: six
// goroutines started and woken per tool call (two transactions), about a
// tenth of the server's CPU on a 2-core machine with the scheduler's
// hand-offs. Here a transaction's statements, BEGIN IMMEDIATE and COMMIT
// included, are prepared once per connection and run on the calling
// goroutine; with a context that cannot end (the event log's) the driver
// starts no goroutine either.
type direct struct {
	mu sync.Mutex
	// conn is the driver connection stmts were prepared on: the writer
	// pool has one, for the life of the store.
	conn  any
	stmts map[string]driver.Stmt
	// named holds a statement's converted arguments, reused by the next
	// (the driver copies them into SQLite when it binds them and keeps no
	// reference): a tool call's statements allocated 3 KB of them.
	named []driver.NamedValue
	// memo is what conn remembers between transactions (memo.go); nil
	// when the driver cannot tell it of changes.
	memo *sqlstore.WriteMemo
}

// pipeline is the dialect's Pipeline: fn's transaction on conn, whose
// statements the Pipe runs at once (nothing is worth sending together
// in process).
func (d *direct) pipeline(ctx context.Context, conn *sql.Conn, fn func(sqlstore.Pipe) error) error {
	return conn.Raw(func(dc any) error {
		d.mu.Lock()
		defer d.mu.Unlock() // one writer connection: never contended
		if d.conn != dc {
			// A new connection (the pool replaced a broken one): the
			// old statements went with it.
			d.conn, d.stmts = dc, map[string]driver.Stmt{}
			d.memo = watch(dc)
		}
		p := &pipe{d: d, c: dc}
		if _, err := p.exec(ctx, "BEGIN IMMEDIATE", nil); err != nil {
			return err
		}
		p.begun = true
		return fn(p)
	})
}

// close finalizes the prepared statements, before the pool closes the
// connection (a statement left open keeps SQLite's connection from
// closing). The connection first, then mu, as a transaction takes them:
// a transaction begun while the store closes must not deadlock with it.
func (d *direct) close(write *sql.DB) {
	conn, err := write.Conn(context.Background())
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.Raw(func(dc any) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if dc == d.conn {
			for _, s := range d.stmts {
				s.Close()
			}
		}
		d.conn, d.stmts, d.named = nil, nil, nil
		return nil
	})
}

// stmt returns query prepared on the connection, or nil to run it
// unprepared (a text of several statements, or past the bound).
func (d *direct) stmt(ctx context.Context, c any, query string) (driver.Stmt, error) {
	if s, ok := d.stmts[query]; ok {
		return s, nil
	}
	if len(d.stmts) >= maxDirectStmts || !sqlstore.SingleStatement(query) {
		return nil, nil
	}
	pc, ok := c.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("sqlite: driver connection %T cannot prepare", c)
	}
	s, err := pc.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	d.stmts[query] = s
	return s, nil
}

// pipe is a sqlstore.Pipe that runs each statement when it is given.
type pipe struct {
	d *direct
	c any
	// begun: BEGIN ran, so ending takes a COMMIT or a ROLLBACK.
	begun bool
	// open is the last query's rows, closed before the next statement
	// (a prepared statement runs once at a time).
	open *pipeRows
	// failed is the error of a queued statement, which the next call
	// returns (as when it goes to PostgreSQL with that call).
	failed error
	// memoChecked: the memo was checked against other connections'
	// commits in this transaction.
	memoChecked bool
}

func (p *pipe) Queue(query string, args []any) {
	if p.failed != nil {
		return
	}
	if _, err := p.exec(context.Background(), query, args); err != nil {
		p.failed = err
	}
}

func (p *pipe) QueueRow(query string, args []any, scan func(scan func(dest ...any) error) error) {
	if p.failed != nil {
		return
	}
	rs, err := p.query(context.Background(), query, args)
	if err == nil {
		err = scan(func(dest ...any) error { return sqlstore.ScanFirst(rs, dest...) })
		if cerr := rs.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.failed = err
	}
}

func (p *pipe) Exec(ctx context.Context, query string, args []any) (int64, error) {
	if p.failed != nil {
		return 0, p.failed
	}
	return p.exec(ctx, query, args)
}

func (p *pipe) Query(ctx context.Context, query string, args []any) (sqlstore.Rows, error) {
	if p.failed != nil {
		return nil, p.failed
	}
	return p.query(ctx, query, args)
}

func (p *pipe) Commit(ctx context.Context) error {
	if p.failed != nil {
		return p.failed
	}
	if _, err := p.exec(ctx, "COMMIT", nil); err != nil {
		return err
	}
	p.begun = false
	if p.d.memo != nil {
		p.d.memo.Commit()
	}
	return nil
}

// Rollback ends the transaction. SQLite may have rolled it back itself
// (an I/O error, a full disk): the ROLLBACK's "no transaction" is then
// no error worth reporting.
func (p *pipe) Rollback(ctx context.Context) error {
	if p.d.memo != nil {
		p.d.memo.Discard()
	}
	if !p.begun {
		return nil
	}
	p.begun = false
	_, err := p.exec(context.WithoutCancel(ctx), "ROLLBACK", nil)
	if err != nil && strings.Contains(err.Error(), "no transaction is active") {
		return nil
	}
	return err
}

// Group runs fns one after the other: a connection in process has no
// round trips to share.
func (p *pipe) Group(ctx context.Context, fns []func(sqlstore.Pipe) error) []error {
	errs := make([]error, len(fns))
	for i, fn := range fns {
		errs[i] = fn(p)
	}
	return errs
}

func (p *pipe) exec(ctx context.Context, query string, args []any) (int64, error) {
	p.closeOpen()
	named, err := p.d.namedValues(args)
	if err != nil {
		return 0, err
	}
	s, err := p.d.stmt(ctx, p.c, query)
	if err != nil {
		return 0, err
	}
	var res driver.Result
	if s != nil {
		se, ok := s.(driver.StmtExecContext)
		if !ok {
			return 0, fmt.Errorf("sqlite: driver statement %T cannot execute", s)
		}
		res, err = se.ExecContext(ctx, named)
	} else {
		ce, ok := p.c.(driver.ExecerContext)
		if !ok {
			return 0, fmt.Errorf("sqlite: driver connection %T cannot execute", p.c)
		}
		res, err = ce.ExecContext(ctx, query, named)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (p *pipe) query(ctx context.Context, query string, args []any) (*pipeRows, error) {
	p.closeOpen()
	named, err := p.d.namedValues(args)
	if err != nil {
		return nil, err
	}
	s, err := p.d.stmt(ctx, p.c, query)
	if err != nil {
		return nil, err
	}
	var dr driver.Rows
	if s != nil {
		sq, ok := s.(driver.StmtQueryContext)
		if !ok {
			return nil, fmt.Errorf("sqlite: driver statement %T cannot query", s)
		}
		dr, err = sq.QueryContext(ctx, named)
	} else {
		cq, ok := p.c.(driver.QueryerContext)
		if !ok {
			return nil, fmt.Errorf("sqlite: driver connection %T cannot query", p.c)
		}
		dr, err = cq.QueryContext(ctx, query, named)
	}
	if err != nil {
		return nil, err
	}
	p.open = &pipeRows{dr: dr, vals: make([]driver.Value, len(dr.Columns()))}
	return p.open, nil
}

func (p *pipe) closeOpen() {
	if p.open != nil {
		p.open.Close()
		p.open = nil
	}
}

// namedValues converts args as database/sql does for a driver that does
// not check them itself (modernc does not): driver.Valuer, pointers and
// Go's numeric kinds to the driver's value types. The result is d.named,
// valid until the next statement (d.mu held: the transaction's).
func (d *direct) namedValues(args []any) ([]driver.NamedValue, error) {
	clear(d.named) // nothing of the last statement's kept alive
	named := d.named[:0]
	for i, a := range args {
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			d.named = named // the next call clears what this one converted
			return nil, fmt.Errorf("sqlite: argument %d: %w", i+1, err)
		}
		named = append(named, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	d.named = named
	return named, nil
}

// pipeRows are a query's rows read from the driver, scanned as
// database/sql scans them (convert.go).
type pipeRows struct {
	dr     driver.Rows
	vals   []driver.Value
	err    error
	closed bool
}

func (r *pipeRows) Next() bool {
	if r.closed || r.err != nil {
		return false
	}
	if err := r.dr.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		r.Close()
		return false
	}
	return true
}

func (r *pipeRows) Scan(dest ...any) error {
	if r.closed {
		return errors.New("sqlite: Scan on closed rows")
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite: Scan: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, v := range r.vals {
		if err := convertAssign(dest[i], v); err != nil {
			return fmt.Errorf("sqlite: Scan column %d: %w", i, err)
		}
	}
	return nil
}

func (r *pipeRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.dr.Close()
}

func (r *pipeRows) Err() error { return r.err }
