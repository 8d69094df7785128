package eventlog

import (
	"context"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// A Chain links ops of one session that must not commit once one of them
// has failed: a run's output and the run's end. When an op of the chain
// fails, every later op of the chain fails with the same error without
// running. So the end can be submitted right behind the output, free to
// share its commit, instead of waiting for the output's commit first (one
// commit fewer on the path of every run, issue 10): if a batch holding both
// fails and is retried in halves, the end cannot commit alone without the
// output that failed before it.
type Chain struct {
	mu  sync.Mutex
	err error
}

// Err is the error of the chain's first failed op, or nil.
func (c *Chain) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail records the chain's first failure.
func (c *Chain) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// AppendAsyncIn is AppendAsync with the op in chain c (nil: none).
func (l *Log) AppendAsyncIn(ctx context.Context, c *Chain, done func([]store.Event, error), events ...store.EventParams) error {
	if len(events) == 0 {
		return nil
	}
	return l.submit(ctx, events[0].SessionID, &op{events: events, done: done, chain: c})
}

// AppendBehindIn is AppendBehind with the op in chain c (nil: none), lingering at
// most linger (0: Options.BehindLinger) for company.
func (l *Log) AppendBehindIn(ctx context.Context, c *Chain, linger time.Duration, done func([]store.Event, error), events ...store.EventParams) error {
	if len(events) == 0 {
		return nil
	}
	return l.submit(ctx, events[0].SessionID, &op{events: events, done: done, chain: c, behind: true, linger: linger})
}

// DoIn is Do with the op in chain c: fn does not run, and DoIn returns
// the chain's error, when an earlier op of c failed.
func (l *Log) DoIn(ctx context.Context, c *Chain, sessionID string, fn TxFunc) ([]store.Event, error) {
	return l.wait(ctx, sessionID, &op{fn: fn, chain: c})
}

// DoAlongside is Do for an fn that reads and writes only rows of
// sessionID (its runs, their tool calls and approvals) and returns only
// its events: in a group commit, other sessions' such fns may run at the
// same time in the transaction, their statements sharing round trips
// (store.Parallel; PostgreSQL). Within sessionID everything stays in
// submission order, as with Do.
func (l *Log) DoAlongside(ctx context.Context, sessionID string, fn TxFunc) ([]store.Event, error) {
	return l.wait(ctx, sessionID, &op{fn: fn, alongside: true, session: sessionID})
}
