package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

// Group runs fns at the same time in the transaction, each on a Pipe of its
// own that shares this one's batches: the statements they wait for are
// sent together, in one round trip, once every fn is waiting or done. A
// group commit of eight callers' tool calls waited for each caller's
// statements in turn, two or three round trips per call (issue 13); so
// grouped they cost two or three in all. The fns must not depend on each
// other's writes: their statements reach the server in no set order
// between them (each fn's own stay in its order).
//
// A statement that fails aborts the transaction, so every fn waiting in
// that batch or later gets an error. A panic in a fn is raised again here,
// once all have returned.
func (p *pipe) Group(ctx context.Context, fns []func(sqlstore.Pipe) error) []error {
	errs := make([]error, len(fns))
	if len(fns) == 1 {
		errs[0] = fns[0](p)
		return errs
	}
	g := &group{p: p, ctx: ctx, running: len(fns)}
	var wg sync.WaitGroup
	var panicked any
	var panicOnce sync.Once
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.leave()
			defer func() {
				if v := recover(); v != nil {
					panicOnce.Do(func() { panicked = v })
					errs[i] = fmt.Errorf("postgres: group member panicked: %v", v)
				}
			}()
			errs[i] = fn(member{g})
		}()
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	return errs
}

// groupStall is how long a member waits for the others before its
// statements are sent anyway: a member blocked on something other than the
// pipe (a lock another member holds while it waits for its statement) would
// otherwise keep the batch from ever leaving. A variable only so that a
// test counting round trips can outwait a loaded machine's scheduler.
var groupStall = time.Millisecond

// group is what the members of one Group share.
type group struct {
	p   *pipe
	ctx context.Context
	// mu guards running, waiting, sending and the pipe's batch.
	mu      sync.Mutex
	running int // members neither waiting for a statement nor done
	waiting int // slots queued in the batch and not yet sent
	sending bool
	// conn serialises the use of the connection and its type map: a batch
	// being read, and members scanning rows read earlier.
	conn sync.Mutex
}

// slot is one member's waited-for statement; done is closed once its
// result is in.
type slot struct {
	rows bool // a Query (else an Exec)
	done chan struct{}
	n    int64
	res  *memRows
	err  error
}

// member is one fn's Pipe in a Group.
type member struct{ g *group }

func (m member) Queue(query string, args []any) {
	m.g.mu.Lock()
	m.g.p.Queue(query, args)
	m.g.mu.Unlock()
}

func (m member) QueueRow(query string, args []any, scan func(scan func(dest ...any) error) error) {
	m.g.mu.Lock()
	m.g.p.QueueRow(query, args, scan)
	m.g.mu.Unlock()
}

func (m member) Exec(ctx context.Context, query string, args []any) (int64, error) {
	s := m.g.wait(ctx, query, args, false)
	return s.n, s.err
}

func (m member) Query(ctx context.Context, query string, args []any) (sqlstore.Rows, error) {
	s := m.g.wait(ctx, query, args, true)
	if s.err != nil {
		return nil, s.err
	}
	return s.res, nil
}

var errInGroup = errors.New("postgres: a group member cannot end the transaction")

func (m member) Commit(context.Context) error   { return errInGroup }
func (m member) Rollback(context.Context) error { return errInGroup }

// Group inside a group runs fns one after the other on the member.
func (m member) Group(_ context.Context, fns []func(sqlstore.Pipe) error) []error {
	errs := make([]error, len(fns))
	for i, fn := range fns {
		if errs[i] = fn(m); errs[i] != nil {
			break
		}
	}
	return errs
}

// wait queues query for a member and returns once its result is in.
func (g *group) wait(ctx context.Context, query string, args []any, rows bool) *slot {
	s := &slot{rows: rows, done: make(chan struct{})}
	g.mu.Lock()
	if g.p.failed != nil {
		s.err = g.p.failed
		g.mu.Unlock()
		return s
	}
	g.p.b.Queue(query, args...)
	g.p.late = append(g.p.late, reader{slot: s})
	g.waiting++
	g.running--
	g.mu.Unlock()
	g.flush(false)
	t := time.NewTimer(groupStall)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return s
		case <-t.C:
			g.flush(true)
			t.Reset(groupStall)
		case <-ctx.Done():
			// The statement is in the batch already: its answer still
			// comes (the batch is sent by the others or the stall), and
			// the transaction's fate is the commit's, so wait for it.
			ctx = context.Background()
		}
	}
}

// leave is a member's end.
func (g *group) leave() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	g.flush(false)
}

// flush sends the batch if some member waits on it and, unless forced, no
// member is still running (it may yet add to the batch); it keeps sending
// while that holds after each batch.
func (g *group) flush(force bool) {
	for {
		g.mu.Lock()
		if g.sending || g.waiting == 0 || (g.running > 0 && !force) {
			g.mu.Unlock()
			return
		}
		g.sending = true
		b, late := g.p.b, g.p.late
		g.p.b, g.p.late = &pgx.Batch{}, nil
		g.waiting = 0
		g.mu.Unlock()

		answered := g.send(b, late)

		g.mu.Lock()
		g.sending = false
		g.running += len(answered)
		g.mu.Unlock()
		for _, s := range answered {
			close(s.done)
		}
		force = false
	}
}

// send sends one batch and reads every result in it; it returns the slots
// it answered (all of the batch's).
func (g *group) send(b *pgx.Batch, late []reader) []*slot {
	g.conn.Lock()
	defer g.conn.Unlock()
	var slots []*slot
	for _, r := range late {
		if r.slot != nil {
			slots = append(slots, r.slot)
		}
	}
	g.p.sent = true
	br := g.p.c.SendBatch(g.ctx, b)
	var err error
	for _, r := range late {
		if err != nil {
			if r.slot != nil {
				r.slot.err = err
			}
			continue
		}
		if r.slot == nil {
			err = r.read(br)
			continue
		}
		r.slot.err = r.slot.read(g, br)
		err = r.slot.err
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
		for _, s := range slots {
			if s.err == nil {
				s.err = cerr
			}
		}
	}
	if err != nil {
		// Whether or not a waiter got it, the transaction is over: every
		// later call says so.
		g.mu.Lock()
		g.p.failed = err
		g.mu.Unlock()
	}
	return slots
}

// read reads a queued statement's result: its row, or only its error.
func (r reader) read(br pgx.BatchResults) error {
	if r.scan == nil {
		_, err := br.Exec()
		return err
	}
	return r.scan(br.QueryRow().Scan)
}

// read reads s's statement's result, its rows kept in memory: the batch
// is read on, for the statements after it, before the member scans them.
func (s *slot) read(g *group, br pgx.BatchResults) error {
	if !s.rows {
		tag, err := br.Exec()
		s.n = tag.RowsAffected()
		return err
	}
	rs, err := br.Query()
	if err != nil {
		return err
	}
	m := &memRows{g: g, i: -1}
	m.fields = append([]pgconn.FieldDescription(nil), rs.FieldDescriptions()...)
	for rs.Next() {
		raw := rs.RawValues()
		row := make([][]byte, len(raw))
		for i, v := range raw {
			if v != nil {
				row[i] = append([]byte{}, v...)
			}
		}
		m.rows = append(m.rows, row)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return err
	}
	s.res = m
	return nil
}

// memRows are a member's query rows, read from their batch into memory and
// decoded as pgx decodes them (the connection's type map) when scanned.
type memRows struct {
	g      *group
	fields []pgconn.FieldDescription
	rows   [][][]byte
	i      int
}

func (m *memRows) Next() bool {
	if m.i+1 >= len(m.rows) {
		m.i = len(m.rows)
		return false
	}
	m.i++
	return true
}

func (m *memRows) Scan(dest ...any) error {
	if m.i < 0 || m.i >= len(m.rows) {
		return errors.New("postgres: Scan called without a row")
	}
	if len(dest) != len(m.fields) {
		return fmt.Errorf("postgres: %d destinations for %d columns", len(dest), len(m.fields))
	}
	m.g.conn.Lock()
	defer m.g.conn.Unlock()
	tm := m.g.p.c.TypeMap()
	for i, d := range dest {
		if d == nil {
			continue
		}
		f := &m.fields[i]
		if err := tm.Scan(f.DataTypeOID, f.Format, m.rows[m.i][i], d); err != nil {
			return fmt.Errorf("can't scan into dest[%d] (col: %s): %w", i, f.Name, err)
		}
	}
	return nil
}

func (m *memRows) Close() error { m.i = len(m.rows); return nil }
func (m *memRows) Err() error   { return nil }
