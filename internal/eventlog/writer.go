package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// ErrClosed is returned for work submitted after Stop began.
var ErrClosed = errors.New("event log closed")

// TxFunc changes state inside the log's transaction and returns the events
// that record the change; they are appended in the same transaction. An
// error rolls back this op only (the batch is retried without it).
type TxFunc func(ctx context.Context, tx store.Queries) ([]store.EventParams, error)

// op is one unit of work for a writer: either a plain append (events) or a
// state change (fn). done, when set, receives the outcome after commit.
type op struct {
	events []store.EventParams
	fn     TxFunc
	done   func(evs []store.Event, err error)
	queued time.Time // when it was submitted (commit latency)
	// behind marks a write-behind append nobody waits for and no client
	// is sent (AppendBehind): it may linger to share a commit.
	behind bool
}

// DefaultBehindLinger is how long a batch of write-behind appends alone
// waits for company before committing (Options.BehindLinger). Every commit has a fixed cost (a transaction,
// the seq update, an fsync) that a lone LLM-call event would pay in full;
// at 1,000 calls/s this shares it ~10 ways (issue 13). Any other op ends
// the wait at once, so nothing a caller or client waits for is delayed.
const DefaultBehindLinger = 10 * time.Millisecond

// writer is one group-commit loop. Ops queue in FIFO order; each commit
// takes everything queued so far, so under load many ops share one fsync and
// under no load an op commits at once — batching never adds a fixed delay.
type writer struct {
	st       store.Store
	origin   string // process id in notifications, so we skip our own
	queue    chan *op
	publish  func([]store.Event)
	maxBatch int
	log      *slog.Logger
	appended *atomic.Int64
	commits  *atomic.Int64
	latency  *metrics.HistogramVec // nil: not measured
	linger   time.Duration         // see DefaultBehindLinger
}

func (w *writer) loop(stopped chan<- struct{}) {
	defer close(stopped)
	batch := make([]*op, 0, w.maxBatch)
	var linger *time.Timer
	for first := range w.queue {
		batch = append(batch[:0], first)
		behind := first.behind
		lingering := false
	drain:
		for len(batch) < w.maxBatch {
			var o *op
			var ok bool
			select {
			case o, ok = <-w.queue:
			default:
				if !behind || w.linger <= 0 {
					break drain
				}
				// Only write-behind appends so far: wait for company, at
				// most until the first has lingered w.linger.
				if !lingering {
					lingering = true
					d := w.linger - time.Since(first.queued)
					if linger == nil {
						linger = time.NewTimer(d)
					} else {
						linger.Reset(d)
					}
				}
				select {
				case o, ok = <-w.queue:
				case <-linger.C:
					lingering = false
					break drain
				}
			}
			if !ok {
				break drain
			}
			batch = append(batch, o)
			behind = behind && o.behind
		}
		if lingering {
			// Go 1.23 timers: after Stop no stale tick can be received.
			linger.Stop()
		}
		w.commit(batch)
	}
}

// commit runs the batch in one transaction. If any op fails, the whole
// transaction is rolled back and each op is retried alone, so one bad op
// (a conflict, a constraint) cannot take its neighbours down with it.
func (w *writer) commit(batch []*op) {
	// Cancellation of the submitter must not abort a shared transaction.
	ctx := context.Background()
	results := make([][]store.Event, len(batch))
	err := w.st.InTx(ctx, func(tx store.Queries) error {
		return w.runOps(ctx, tx, batch, results)
	})
	if err == nil {
		w.finish(batch, results, nil)
		return
	}
	if len(batch) == 1 {
		w.finish(batch, results, []error{err})
		return
	}
	errs := make([]error, len(batch))
	for i, o := range batch {
		one := results[i : i+1]
		errs[i] = w.st.InTx(ctx, func(tx store.Queries) error {
			return w.runOps(ctx, tx, []*op{o}, one)
		})
		if errs[i] != nil {
			one[0] = nil
		}
	}
	w.finish(batch, results, errs)
}

// runOps executes ops in order. Consecutive plain appends are merged into
// one multi-row insert; a state change flushes the pending appends first so
// the log keeps submission order. Last, other processes are told which
// sessions moved (delivered only if this transaction commits).
func (w *writer) runOps(ctx context.Context, tx store.Queries, batch []*op, results [][]store.Event) error {
	if err := runOps(ctx, tx, batch, results); err != nil {
		return err
	}
	var sessions []string
	seen := map[string]bool{}
	for _, evs := range results {
		for i := range evs {
			if s := evs[i].SessionID; !seen[s] {
				seen[s] = true
				sessions = append(sessions, s)
			}
		}
	}
	return tx.EventsNotify(ctx, w.origin, sessions)
}

func runOps(ctx context.Context, tx store.Queries, batch []*op, results [][]store.Event) error {
	ended, err := endedRuns(ctx, tx, batch)
	if err != nil {
		return err
	}
	var pending []store.EventParams
	var owners []int // op index for each pending event
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		out, err := tx.EventsAppend(ctx, pending)
		if err != nil {
			return err
		}
		for i, e := range out {
			results[owners[i]] = append(results[owners[i]], e)
		}
		pending, owners = pending[:0], owners[:0]
		return nil
	}
	for i, o := range batch {
		results[i] = nil
		evs := o.events
		if ended != nil {
			evs = dropEnded(evs, ended)
		}
		if o.fn != nil {
			if err := flush(); err != nil {
				return err
			}
			var err error
			if evs, err = o.fn(ctx, tx); err != nil {
				return err
			}
		}
		for range evs {
			owners = append(owners, i)
		}
		pending = append(pending, evs...)
	}
	return flush()
}

func (w *writer) finish(batch []*op, results [][]store.Event, errs []error) {
	var all []store.Event
	for i, o := range batch {
		var err error
		if errs != nil {
			err = errs[i]
		}
		if err == nil {
			all = append(all, results[i]...)
		} else if o.done == nil {
			w.log.Error("event log append failed", "err", err)
		}
		if o.done != nil {
			if err != nil {
				o.done(nil, fmt.Errorf("event log: %w", err))
			} else {
				o.done(results[i], nil)
			}
		}
	}
	w.commits.Add(1)
	if w.latency != nil && !batch[0].queued.IsZero() && !batch[0].behind {
		// The batch's first op waited longest: queue, transaction, commit.
		w.latency.Observe(time.Since(batch[0].queued).Seconds())
	}
	if len(all) > 0 {
		w.appended.Add(int64(len(all)))
		w.publish(all)
	}
}

// endedRuns reads, once per batch, which runs with IfRunActive events have
// ended, so those events are dropped rather than logged after the run's
// terminal event. Nil when the batch has no such event.
func endedRuns(ctx context.Context, tx store.Queries, batch []*op) (map[string]bool, error) {
	var ids []string
	seen := map[string]bool{}
	for _, o := range batch {
		for i := range o.events {
			if e := &o.events[i]; e.IfRunActive && !seen[e.RunID] {
				seen[e.RunID] = true
				ids = append(ids, e.RunID)
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	ended, err := tx.RunsEnded(ctx, ids)
	if err != nil || len(ended) == 0 {
		return nil, err
	}
	return ended, nil
}

func dropEnded(evs []store.EventParams, ended map[string]bool) []store.EventParams {
	keep := evs[:0:0]
	for _, e := range evs {
		if !e.IfRunActive || !ended[e.RunID] {
			keep = append(keep, e)
		}
	}
	return keep
}
