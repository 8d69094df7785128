package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

// pipeline runs a write transaction on conn through pgx itself, so that
// statements whose results nobody waits for go out together with the next
// one that is waited for, in one batch (one round trip): BEGIN with the
// first statement, queued inserts with the next read, the last of them
// with COMMIT. database/sql has no way to send two statements at once.
func pipeline(ctx context.Context, conn *sql.Conn, fn func(sqlstore.Pipe) error) error {
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: pipeline: driver connection is %T", dc)
		}
		p := &pipe{c: sc.Conn(), b: &pgx.Batch{}}
		p.Queue("BEGIN", nil)
		return fn(p)
	})
}

// pipe is a sqlstore.Pipe over one pgx connection in a transaction.
type pipe struct {
	c *pgx.Conn
	// b is queued; a batch sent is read from until its results close, so
	// the next is a new one.
	b *pgx.Batch
	// late[i] is what reads the result of b's i-th statement (zero: it is
	// not read).
	late []reader
	// sent: some of the transaction (its BEGIN at least) reached the
	// server, so ending it takes a COMMIT or a ROLLBACK.
	sent bool
	// failed is the error of a queued statement that no call has returned
	// yet (Group's batches end with one when the last waiter came before
	// it): the next one returns it.
	failed error
}

// reader reads one statement's result from a sent batch: a queued row's
// scan, or the slot of a group member waiting for it (group.go); neither:
// only its error is read.
type reader struct {
	scan func(scan func(dest ...any) error) error
	slot *slot
}

func (p *pipe) Queue(query string, args []any) {
	p.b.Queue(query, args...)
	p.late = append(p.late, reader{})
}

func (p *pipe) QueueRow(query string, args []any, scan func(scan func(dest ...any) error) error) {
	p.b.Queue(query, args...)
	p.late = append(p.late, reader{scan: scan})
}

// send sends the queued statements and query, and reads the results of all
// but query, which is left for the caller to read from the batch. An error
// of an earlier statement comes back with the batch already closed.
func (p *pipe) send(ctx context.Context, query string, args []any) (pgx.BatchResults, error) {
	if p.failed != nil {
		return nil, p.failed
	}
	p.b.Queue(query, args...)
	late := p.late
	br := p.c.SendBatch(ctx, p.b)
	p.b, p.late = &pgx.Batch{}, nil
	p.sent = true
	for _, r := range late {
		if err := r.read(br); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (p *pipe) Exec(ctx context.Context, query string, args []any) (int64, error) {
	br, err := p.send(ctx, query, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p *pipe) Query(ctx context.Context, query string, args []any) (sqlstore.Rows, error) {
	br, err := p.send(ctx, query, args)
	if err != nil {
		return nil, err
	}
	rs, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &pipeRows{rs: rs, br: br}, nil
}

func (p *pipe) Commit(ctx context.Context) error {
	if !p.sent && p.b.Len() == 1 {
		p.b, p.late = &pgx.Batch{}, nil // only the BEGIN: nothing to commit
		return nil
	}
	br, err := p.send(ctx, "COMMIT", nil)
	if err != nil {
		return err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// COMMIT of a transaction that failed answers ROLLBACK, not an error.
	if tag.String() != "COMMIT" {
		return fmt.Errorf("postgres: commit answered %q", tag.String())
	}
	p.sent = false
	return nil
}

func (p *pipe) Rollback(ctx context.Context) error {
	p.b, p.late, p.failed = &pgx.Batch{}, nil, nil
	if !p.sent {
		return nil
	}
	p.sent = false
	if p.c.IsClosed() {
		return nil
	}
	_, err := p.c.Exec(ctx, "ROLLBACK")
	return err
}

// pipeRows are a query's rows, read from its batch; closing them closes
// the batch.
type pipeRows struct {
	rs     pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *pipeRows) Next() bool { return r.rs.Next() }

func (r *pipeRows) Scan(dest ...any) error { return r.rs.Scan(dest...) }

func (r *pipeRows) Err() error {
	if err := r.rs.Err(); err != nil {
		return err
	}
	return r.err
}

func (r *pipeRows) Close() error {
	if r.closed {
		return r.err
	}
	r.closed = true
	r.rs.Close()
	r.err = errors.Join(r.rs.Err(), r.br.Close())
	return r.err
}
