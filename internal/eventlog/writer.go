package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
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
	// linger, for a behind op, bounds its wait for company instead of the
	// writer's default (0: the default).
	linger time.Duration
	// chain, when set, links this op to others that must not commit once
	// one of them failed (Chain).
	chain *Chain
	// alongside: fn reads and writes only rows of session (DoAlongside),
	// so it may run at the same time as other sessions' such ops.
	alongside bool
	session   string
	// finished: its batch is done and no longer pending.
	finished bool
}

// DefaultBehindLinger is how long a batch of write-behind appends alone
// waits for company before committing (Options.BehindLinger). Every commit has a fixed cost (a transaction,
// the seq update, the WAL frames and an fsync) that a lone LLM-call event
// would pay in full; at 1,000 calls/s this shares it ~50 ways (issue 13).
// Measured on the binary at 1,000 JSON calls/s, 10 ms (~11 records per
// commit) cost 12-17 % more of the server's CPU per call on SQLite than
// 50 ms, and PostgreSQL's backends twice the CPU; the records are written
// behind a call whose response has already gone, so only a crash's window
// (the records of its last 50 ms) and a trace's freshness grow with it.
// Any other op ends the wait at once, so nothing a caller or client waits
// for is delayed.
const DefaultBehindLinger = 50 * time.Millisecond

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

	// lead is held by whoever commits a batch: the loop, or a submitter
	// that waits for its op and found the writer idle (commitInline).
	// Commits, and the observers they call, stay one at a time and in
	// order.
	lead sync.Mutex
	// pending counts ops submitted and not yet committed (queued, or taken
	// by the loop). It rises before a submit returns, so an op submitted
	// after another — by the same goroutine or one it told — sees it
	// and cannot overtake it by committing inline.
	pending atomic.Int64
}

func (w *writer) loop(stopped chan<- struct{}) {
	defer close(stopped)
	batch := make([]*op, 0, w.maxBatch)
	var linger *time.Timer
	for first := range w.queue {
		// Taken before the drain, so what queued while an inline commit
		// held it joins this batch.
		w.lead.Lock()
		batch = append(batch[:0], first)
		behind := first.behind
		deadline := w.lingerUntil(first)
		lingering := false
	drain:
		for len(batch) < w.maxBatch {
			var o *op
			var ok bool
			select {
			case o, ok = <-w.queue:
			default:
				if !behind || deadline.IsZero() {
					break drain
				}
				// Only write-behind appends so far: wait for company, at
				// most until one of them has lingered its limit.
				if !lingering {
					lingering = true
					d := time.Until(deadline)
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
			if behind {
				if d := w.lingerUntil(o); d.Before(deadline) {
					deadline = d
					if lingering { // wait no longer than o may
						linger.Reset(time.Until(deadline))
					}
				}
			}
		}
		if lingering {
			// Go 1.23 timers: after Stop no stale tick can be received.
			linger.Stop()
		}
		w.commit(batch)
		w.lead.Unlock()
	}
}

// lingerUntil is when a write-behind op o has waited for company as long
// as it may (its own linger, else the writer's); zero if it may not wait.
func (w *writer) lingerUntil(o *op) time.Time {
	limit := w.linger
	if o.linger > 0 {
		limit = o.linger
	}
	if !o.behind || limit <= 0 {
		return time.Time{}
	}
	return o.queued.Add(limit)
}

// commitInline commits o on the caller's goroutine when nothing is pending
// and nobody is committing, and reports whether it did. A submitter that
// would only wait for the loop to do it saves the loop's wake-up and its
// own: two goroutine hand-offs per commit, each a futex wake and, on a
// small machine, a wait for the scheduler (issue 13: a sequential tool
// call is two such commits). Under load the queue is rarely empty and ops
// share the loop's commits as before.
func (w *writer) commitInline(o *op) bool {
	if w.pending.Load() != 0 || !w.lead.TryLock() {
		return false
	}
	defer w.lead.Unlock()
	if !w.pending.CompareAndSwap(0, 1) {
		return false // an op arrived meanwhile: it goes first
	}
	defer func() {
		if !o.finished { // a panic in o's TxFunc: it no longer pends
			w.pending.Add(-1)
		}
	}()
	o.queued = time.Now()
	w.commit([]*op{o})
	return true
}

// commit runs the batch in one transaction. If any op fails, the whole
// transaction is rolled back and the batch is retried in halves, in order, so
// one bad op (a conflict, a constraint) cannot take its neighbours down and
// costs O(log n) transactions rather than one per op: a batch grows to
// thousands of ops when the writer is behind (issue 13), and retrying each
// alone would then stall the log for seconds.
func (w *writer) commit(batch []*op) {
	began := time.Now()
	results := make([][]store.Event, len(batch))
	var errs []error
	if err := w.try(batch, results); err != nil {
		errs = make([]error, len(batch))
		if len(batch) == 1 {
			errs[0] = err
			failChain(batch[0], err)
		} else {
			w.split(batch, results, errs)
		}
	}
	w.finish(batch, results, errs, began)
}

// try runs ops in one transaction. On failure nothing is kept in results.
//
// Where the store can (store.RunsActiveAsserter: PostgreSQL), the check
// that the runs whose output the ops append are still active is sent
// with the statements after it instead of waited for — one round trip
// fewer per transaction; an op's TxFunc may likewise assume what it would
// otherwise read first (Assume). When that transaction fails, a run had
// ended, an assumption was wrong or something else went wrong, which a
// failed check may have caused (an op that carries on after a failed
// statement); the ops run once more, asking first, as everywhere else.
func (w *writer) try(ops []*op, results [][]store.Event) error {
	asserted, err := w.tryAsking(ops, results, false)
	if err != nil && asserted {
		_, err = w.tryAsking(ops, results, true)
	}
	return err
}

// tryAsking is try's transaction: ask, which runs have ended is read
// before the ops run and the ops may assume nothing; else the runs are
// asserted active where the store can, and the ops may assume (asserted
// true if either was done).
func (w *writer) tryAsking(ops []*op, results [][]store.Event, ask bool) (asserted bool, err error) {
	// Cancellation of the submitter must not abort a shared transaction.
	ctx := context.Background()
	assumed := &assumption{allowed: !ask}
	var outs []appended
	err = w.st.InTx(ctx, func(tx store.Queries) (err error) {
		var ended map[string]bool
		if ended, asserted, err = checkRuns(ctx, tx, ops, ask); err != nil {
			return err
		}
		outs, err = w.runOps(context.WithValue(ctx, assumeKey{}, assumed), tx, ops, results, ended)
		return err
	})
	asserted = asserted || assumed.made.Load()
	if err != nil {
		clear(results)
		return asserted, err
	}
	// Only now: the events' seqs may be filled in by the commit.
	for _, a := range outs {
		// An op's events are consecutive in a.out: each op gets its run
		// of it (capped, so an append to it copies), not a slice of its
		// own — one allocation fewer per op, a delta's each (issue 13).
		for lo := 0; lo < len(a.out); {
			owner, hi := a.owners[lo], lo+1
			for hi < len(a.out) && a.owners[hi] == owner {
				hi++
			}
			if results[owner] == nil {
				results[owner] = a.out[lo:hi:hi]
			} else {
				results[owner] = append(results[owner], a.out[lo:hi]...)
			}
			lo = hi
		}
	}
	return asserted, nil
}

// assumption is what a transaction's TxFuncs may do and did (Assume).
type assumption struct {
	allowed bool
	made    atomic.Bool // set by ops that may run at the same time (DoAlongside)
}

type assumeKey struct{}

// Assume reports whether a TxFunc, running in ctx, may send a statement
// that fails the transaction when what it assumes is wrong, instead of
// reading first whether it is (store.RunQuietEnder): true the first time
// the transaction runs. If it fails, the log runs it again with Assume false,
// so the TxFunc reads first. Ask only when about to make the assumption:
// a true answer marks the transaction as having made one.
func Assume(ctx context.Context) bool {
	a, _ := ctx.Value(assumeKey{}).(*assumption)
	if a == nil || !a.allowed {
		return false
	}
	a.made.Store(true)
	return true
}

// appended is one append of a transaction: its events and, for each, the
// index of the op it belongs to.
type appended struct {
	out    []store.Event
	owners []int
}

// split retries a failed batch: each half in one transaction, the first
// before the second (a session's ops commit in submission order), halving
// again whatever fails until the failing op is alone and gets its error.
func (w *writer) split(ops []*op, results [][]store.Event, errs []error) {
	if len(ops) == 1 {
		errs[0] = w.try(ops, results)
		failChain(ops[0], errs[0])
		return
	}
	mid := len(ops) / 2
	for _, r := range [][2]int{{0, mid}, {mid, len(ops)}} {
		part, res, perr := ops[r[0]:r[1]], results[r[0]:r[1]], errs[r[0]:r[1]]
		if len(part) == 1 || w.try(part, res) != nil {
			w.split(part, res, perr)
		}
	}
}

// failChain records that o failed for good (err non-nil) in its chain, so
// its later ops fail too; the halves of a split run in order, so a later
// op of the chain sees it.
func failChain(o *op, err error) {
	if err != nil && o.chain != nil {
		o.chain.fail(err)
	}
}

// runOps executes ops in order. Consecutive plain appends are merged into
// one multi-row insert; a state change flushes the pending appends first so
// the log keeps submission order. Last, other processes are told which
// sessions moved (delivered only if this transaction commits), with the
// last appends (one statement on PostgreSQL where it can).
func (w *writer) runOps(ctx context.Context, tx store.Queries, batch []*op, results [][]store.Event, ended map[string]bool) ([]appended, error) {
	return runOps(ctx, tx, batch, results, ended, func(pending []store.EventParams, earlier []appended) ([]store.Event, error) {
		var sessions []string
		seen := map[string]bool{}
		add := func(s string) {
			if !seen[s] {
				seen[s] = true
				sessions = append(sessions, s)
			}
		}
		// The transaction's appends so far: their events reach the ops'
		// results only after the commit, so they are named from here.
		for _, a := range earlier {
			for i := range a.out {
				add(a.out[i].SessionID)
			}
		}
		for i := range pending {
			add(pending[i].SessionID)
		}
		if len(pending) == 0 {
			return nil, tx.EventsNotify(ctx, w.origin, sessions)
		}
		return tx.EventsAppendNotify(ctx, pending, w.origin, sessions)
	})
}

// runOps runs the batch's ops, dropping the IfRunActive events of the
// ended runs; last appends what is pending at the end (possibly nothing)
// and ends the transaction's work. It returns the appends, whose events go
// to results once the transaction has committed (their seqs may be filled
// in by the commit: store.Queries.EventsAppend).
func runOps(ctx context.Context, tx store.Queries, batch []*op, results [][]store.Event, ended map[string]bool, last func(pending []store.EventParams, earlier []appended) ([]store.Event, error)) ([]appended, error) {
	var a appends
	a.presize(batch)
	flush := func() error { return a.flush(ctx, tx) }
	_, parallel := tx.(store.Parallel)
	for i := 0; i < len(batch); {
		if n := alongside(batch[i:]); parallel && n > 0 {
			// A state change flushes the pending appends first, as below.
			if err := flush(); err != nil {
				return nil, err
			}
			got, err := runAlongside(ctx, tx, batch, i, i+n, results, ended)
			if err != nil {
				return nil, err
			}
			a.outs = append(a.outs, got...)
			i += n
			continue
		}
		results[i] = nil
		evs, err := runOp(ctx, tx, batch[i], ended, flush)
		if err != nil {
			return nil, err
		}
		a.add(i, evs)
		i++
	}
	out, err := last(a.pending, a.outs)
	if err != nil {
		return nil, err
	}
	a.take(out)
	return a.outs, nil
}

// appends gathers a transaction's events still to append, with the index
// of the op each belongs to, and the appends made so far.
type appends struct {
	pending []store.EventParams
	owners  []int
	outs    []appended
}

// presize makes room for the events batch's ops carry (those an op's fn
// returns may need more): one allocation each instead of one per doubling
// for a commit of many streams' deltas.
func (a *appends) presize(batch []*op) {
	n := 0
	for _, o := range batch {
		n += len(o.events)
	}
	a.pending = make([]store.EventParams, 0, n)
	a.owners = make([]int, 0, n)
}

func (a *appends) add(op int, evs []store.EventParams) {
	for range evs {
		a.owners = append(a.owners, op)
	}
	a.pending = append(a.pending, evs...)
}

// take records out, the pending events as appended.
func (a *appends) take(out []store.Event) {
	if len(out) > 0 {
		a.outs = append(a.outs, appended{out: out, owners: slices.Clone(a.owners)})
	}
	a.pending, a.owners = a.pending[:0], a.owners[:0]
}

// flush appends the pending events.
func (a *appends) flush(ctx context.Context, tx store.Queries) error {
	if len(a.pending) == 0 {
		return nil
	}
	out, err := tx.EventsAppend(ctx, a.pending)
	if err == nil {
		a.take(out)
	}
	return err
}

// runOp runs one op of a transaction and returns the events it appends: its
// own, less those of runs that have ended, or what its fn returns — after
// flush has appended what is pending, so the log keeps submission order.
func runOp(ctx context.Context, tx store.Queries, o *op, ended map[string]bool, flush func() error) ([]store.EventParams, error) {
	if o.chain != nil {
		if err := o.chain.Err(); err != nil {
			return nil, err // an earlier op of its chain failed
		}
	}
	evs := o.events
	if ended != nil {
		evs = dropEnded(evs, ended)
	}
	if o.fn == nil {
		return evs, nil
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return o.fn(ctx, tx)
}

// alongside returns how many ops at the start of ops may run at the same
// time: a run of DoAlongside ops of at least two sessions (0 if not).
func alongside(ops []*op) int {
	n := 0
	two := false
	for n < len(ops) && ops[n].alongside {
		two = two || ops[n].session != ops[0].session
		n++
	}
	if !two {
		return 0
	}
	return n
}

// runAlongside runs batch[from:to], DoAlongside ops, one session's after
// the other in their order and the sessions at the same time
// (store.RunParallel), each session appending its ops' events itself.
func runAlongside(ctx context.Context, tx store.Queries, batch []*op, from, to int, results [][]store.Event, ended map[string]bool) ([]appended, error) {
	var sessions []string
	bySession := map[string][]int{}
	for i := from; i < to; i++ {
		s := batch[i].session
		if _, ok := bySession[s]; !ok {
			sessions = append(sessions, s)
		}
		bySession[s] = append(bySession[s], i)
	}
	outs := make([][]appended, len(sessions))
	fns := make([]func(store.Queries) error, len(sessions))
	for k, s := range sessions {
		fns[k] = func(tx store.Queries) error {
			var err error
			outs[k], err = runSessionOps(ctx, tx, batch, bySession[s], results, ended)
			return err
		}
	}
	if err := store.RunParallel(ctx, tx, fns); err != nil {
		return nil, err
	}
	var all []appended
	for _, o := range outs {
		all = append(all, o...)
	}
	return all, nil
}

// runSessionOps runs the ops at idx, all of one session, in order, and
// appends their events.
func runSessionOps(ctx context.Context, tx store.Queries, batch []*op, idx []int, results [][]store.Event, ended map[string]bool) ([]appended, error) {
	var a appends
	a.presize(batch)
	flush := func() error { return a.flush(ctx, tx) }
	for _, i := range idx {
		results[i] = nil
		evs, err := runOp(ctx, tx, batch[i], ended, flush)
		if err != nil {
			return nil, err
		}
		a.add(i, evs)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return a.outs, nil
}

func (w *writer) finish(batch []*op, results [][]store.Event, errs []error, began time.Time) {
	n := 0
	for i := range batch {
		if errs == nil || errs[i] == nil {
			n += len(results[i])
		}
	}
	all := make([]store.Event, 0, n) // one allocation, not one per doubling
	for i := range batch {
		if errs == nil || errs[i] == nil {
			all = append(all, results[i]...)
		}
	}
	// Counted (and its latency observed) before anyone is told: a caller
	// whose Append returned sees its commit in Stats and the metrics, and an
	// op it submits next may commit inline.
	for _, o := range batch {
		o.finished = true
	}
	w.pending.Add(-int64(len(batch)))
	w.commits.Add(1)
	w.appended.Add(int64(len(all)))
	if w.latency != nil {
		// Every commit is observed once: from the submission of its oldest
		// write someone waits for (queue, transaction, commit); a batch of
		// write-behind appends only (deltas, a run's end, LLM call
		// records), which linger on purpose to share a commit, from the
		// moment the writer took it.
		from := began
		for _, o := range batch {
			if !o.behind && !o.queued.IsZero() {
				from = o.queued
				break
			}
		}
		w.latency.Observe(time.Since(from).Seconds())
	}
	for i, o := range batch {
		var err error
		if errs != nil {
			err = errs[i]
		}
		if err != nil && o.done == nil {
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
	if len(all) > 0 {
		w.publish(all)
	}
}

// checkRuns finds which runs with IfRunActive events in batch have ended
// (ask, or a store that cannot assert), or has the store assert them
// active (asserted: the ended map is then empty, and the transaction fails
// if one has ended).
func checkRuns(ctx context.Context, tx store.Queries, batch []*op, ask bool) (ended map[string]bool, asserted bool, err error) {
	if !ask {
		if asserted, err = assertActive(ctx, tx, batch); asserted || err != nil {
			return nil, asserted, err
		}
	}
	ended, err = endedRuns(ctx, tx, batch)
	return ended, false, err
}

// assertActive has the store check, without waiting for the answer, that
// the runs with IfRunActive events in batch are active (true), where it
// can (store.RunsActiveAsserter); false when it cannot or the batch has no
// such event.
func assertActive(ctx context.Context, tx store.Queries, batch []*op) (bool, error) {
	a, ok := tx.(store.RunsActiveAsserter)
	if !ok {
		return false, nil
	}
	ids := ifRunActive(batch)
	if len(ids) == 0 {
		return false, nil
	}
	return true, a.AssertRunsActive(ctx, ids)
}

// ifRunActive lists, once each, the runs of batch's IfRunActive events.
func ifRunActive(batch []*op) []string {
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
	return ids
}

// endedRuns reads, once per batch, which runs with IfRunActive events have
// ended, so those events are dropped rather than logged after the run's
// terminal event. Nil when the batch has no such event.
func endedRuns(ctx context.Context, tx store.Queries, batch []*op) (map[string]bool, error) {
	ids := ifRunActive(batch)
	if len(ids) == 0 {
		return nil, nil
	}
	// Asked about in statements of a power of two (≤ 256) runs, the last
	// run repeated to fill one up: the statement's text depends on the
	// count, and a few texts stay in the store's prepared statement cache
	// where one per batch size would flood it. Filled up rather than split
	// (11 runs: one statement of 16, not three of 8, 2 and 1): each
	// statement is a round trip on PostgreSQL, and on SQLite a tenth of
	// the server's CPU at 200 streams went to these (issue 13).
	var ended map[string]bool
	for len(ids) > 0 {
		n := min(len(ids), runsEndedChunk)
		ask := ids[:n]
		if size := roundUpPow2(n); size > n {
			ask = make([]string, size)
			copy(ask, ids[:n])
			for i := n; i < size; i++ {
				ask[i] = ids[n-1]
			}
		}
		got, err := tx.RunsEnded(ctx, ask)
		if err != nil {
			return nil, err
		}
		for id, yes := range got {
			if !yes {
				continue
			}
			if ended == nil {
				ended = map[string]bool{}
			}
			ended[id] = true
		}
		ids = ids[n:]
	}
	return ended, nil
}

// roundUpPow2 is the least power of two ≥ n (n ≥ 1).
func roundUpPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// runsEndedChunk is the most runs one RunsEnded statement asks about.
const runsEndedChunk = 256

func dropEnded(evs []store.EventParams, ended map[string]bool) []store.EventParams {
	keep := evs[:0:0]
	for _, e := range evs {
		if !e.IfRunActive || !ended[e.RunID] {
			keep = append(keep, e)
		}
	}
	return keep
}
