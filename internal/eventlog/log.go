// Package eventlog is the append-only log that is the source of truth
// (DESIGN §2.1): appends with a per-session seq committed before anyone sees
// them, state changes committed in the same transaction as their events, and
// subscriptions that replay from a seq and then follow live.
package eventlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// Options tune the log. Zero values pick defaults.
type Options struct {
	// Shards is the number of writer loops; a session always uses the same
	// one, which keeps its events in order. Default 1: group commit already
	// amortises round trips, and more shards only make smaller commits (the
	// foundation benchmark measured 4 shards on PostgreSQL at 4-6 events per
	// commit and twice the database CPU of 1 shard at ~20). Raise it only for
	// a large PostgreSQL server.
	Shards int
	// QueueSize bounds each writer's queue; submitters block when it is
	// full (backpressure instead of unbounded memory). Default 8192.
	QueueSize int
	// MaxBatch bounds the ops in one transaction. Default 8192.
	MaxBatch int
	Logger   *slog.Logger
	// Origin is a readable prefix of the name this log gives itself in
	// cross-process notifications (e.g. the instance id). The log adds a
	// random part: two processes must never share an origin, or each
	// would skip the other's notifications as its own (issue 8, item 12).
	Origin string
	// Metrics, when set, receives the commit latency.
	Metrics *metrics.Registry
	// BehindLinger: see DefaultBehindLinger. Zero means the default,
	// negative no lingering.
	BehindLinger time.Duration
}

// Log appends events and fans them out to subscribers after commit.
type Log struct {
	origin  string
	st      store.Store
	hub     *Hub
	shards  []*writer
	stopped []chan struct{}
	seed    maphash.Seed

	appended atomic.Int64
	commits  atomic.Int64

	mu      sync.RWMutex // guards closing against concurrent submits
	closing bool
	stop    sync.Once

	obsMu  sync.RWMutex
	local  []func([]store.Event)
	remote []func(sessionIDs []string)
}

// New starts the writer loops.
func New(st store.Store, opts Options) *Log {
	if opts.Shards <= 0 {
		opts.Shards = 1
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 8192
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 8192
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BehindLinger == 0 {
		opts.BehindLinger = DefaultBehindLinger
	}
	l := &Log{origin: newOrigin(opts.Origin), st: st, hub: NewHub(), seed: maphash.MakeSeed()}
	var commitLatency *metrics.HistogramVec
	if opts.Metrics != nil {
		commitLatency = metrics.EventCommit(opts.Metrics)
	}
	for range opts.Shards {
		w := &writer{st: st, origin: l.origin, appended: &l.appended, commits: &l.commits, queue: make(chan *op, opts.QueueSize), publish: l.publish, maxBatch: opts.MaxBatch, log: opts.Logger, latency: commitLatency, linger: opts.BehindLinger}
		stopped := make(chan struct{})
		l.shards = append(l.shards, w)
		l.stopped = append(l.stopped, stopped)
		go w.loop(stopped)
	}
	return l
}

// newOrigin is prefix (without spaces, which separate a notification's
// origin from its sessions) and a random part, unique to this process
// start.
func newOrigin(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	prefix = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == ',' {
			return '_'
		}
		return r
	}, prefix)
	return prefix + "#" + hex.EncodeToString(b[:])
}

// Origin is this log's (this process start's) name in notifications.
func (l *Log) Origin() string { return l.origin }

// Observe registers hooks that see the log move without subscribing to a
// session: local gets every batch of events this process commits (after
// the commit, on the writer goroutine, so it must not block); remote gets
// the sessions other processes reported (nil: any session may have moved,
// after a listener reconnect). The tool service wakes its long-polls so.
func (l *Log) Observe(local func([]store.Event), remote func(sessionIDs []string)) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	if local != nil {
		l.local = append(l.local, local)
	}
	if remote != nil {
		l.remote = append(l.remote, remote)
	}
}

// publish hands committed events to the local observers first, then to
// subscribers: whoever has seen an event from this process (a client that
// saw its run end) can rely on the observers having seen it too (the LLM
// proxy's run cache refuses the ended run's next call).
func (l *Log) publish(events []store.Event) {
	l.obsMu.RLock()
	for _, fn := range l.local {
		fn(events)
	}
	l.obsMu.RUnlock()
	l.hub.Publish(events)
}

// Stats reports events appended and transactions committed so far.
func (l *Log) Stats() (events, commits int64) { return l.appended.Load(), l.commits.Load() }

// Store is the store the log writes to.
func (l *Log) Store() store.Store { return l.st }

// Hub is the live fan-out, for components that bridge other processes'
// commits into it.
func (l *Log) Hub() *Hub { return l.hub }

func (l *Log) shardFor(sessionID string) *writer {
	if len(l.shards) == 1 {
		return l.shards[0]
	}
	return l.shards[maphash.String(l.seed, sessionID)%uint64(len(l.shards))]
}

func (l *Log) submit(ctx context.Context, sessionID string, o *op) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closing {
		return ErrClosed
	}
	o.queued = time.Now()
	w := l.shardFor(sessionID)
	w.pending.Add(1)
	select {
	case w.queue <- o:
		return nil
	case <-ctx.Done():
		w.pending.Add(-1)
		return ctx.Err()
	}
}

// tryInline commits o on the caller's goroutine if its writer is idle
// (writer.commitInline).
func (l *Log) tryInline(sessionID string, o *op) (bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closing {
		return false, ErrClosed
	}
	return l.shardFor(sessionID).commitInline(o), nil
}

// Append appends events (all of one session) and returns them with their
// seq and event_id once committed and published.
func (l *Log) Append(ctx context.Context, events ...store.EventParams) ([]store.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	return l.wait(ctx, events[0].SessionID, &op{events: events})
}

// Do runs fn and appends the events it returns in one transaction,
// serialised with the other writes of sessionID. It returns the appended
// events, or fn's error with nothing written.
func (l *Log) Do(ctx context.Context, sessionID string, fn TxFunc) ([]store.Event, error) {
	return l.DoIn(ctx, nil, sessionID, fn)
}

type outcome struct {
	evs []store.Event
	err error
}

func (l *Log) wait(ctx context.Context, sessionID string, o *op) ([]store.Event, error) {
	ch := make(chan outcome, 1)
	o.done = func(evs []store.Event, err error) { ch <- outcome{evs, err} }
	inline, err := l.tryInline(sessionID, o)
	if err != nil {
		return nil, err
	}
	if !inline {
		if err := l.submit(ctx, sessionID, o); err != nil {
			return nil, err
		}
	}
	// Once queued the op will commit even if ctx ends; wait regardless so the
	// caller never acts on a write whose fate it does not know. (Inline, it
	// has committed already.)
	r := <-ch
	return r.evs, r.err
}

// AppendAsync queues events without waiting; done (may be nil) is called
// after commit with the outcome. Ops of one session commit in submission
// order, so a later Do/Append of the same session commits after these.
func (l *Log) AppendAsync(ctx context.Context, done func([]store.Event, error), events ...store.EventParams) error {
	return l.AppendAsyncIn(ctx, nil, done, events...)
}

// AppendBehind is AppendAsync for events nobody waits for and no client is
// sent (the LLM proxy's call records): they may wait up to Options.BehindLinger for
// other ops to share their commit. Order within the session is kept as for
// AppendAsync.
func (l *Log) AppendBehind(ctx context.Context, done func([]store.Event, error), events ...store.EventParams) error {
	return l.AppendBehindIn(ctx, nil, 0, done, events...)
}

// Notified feeds notifications from other processes into the hub: their
// sessions' subscribers re-read the store. A nil list (after a listener
// reconnect) re-checks every subscription. Our own notifications are skipped:
// the hub already has those events.
func (l *Log) Notified(origin string, sessionIDs []string) {
	if sessionIDs != nil && origin == l.origin {
		return
	}
	// Observers first: once a subscriber here has seen another process's
	// event, this process's caches have heard of it too (the LLM proxy
	// refuses a run a client has just seen end).
	l.obsMu.RLock()
	for _, fn := range l.remote {
		fn(sessionIDs)
	}
	l.obsMu.RUnlock()
	if sessionIDs == nil {
		l.hub.PokeAll()
	}
	for _, s := range sessionIDs {
		l.hub.Poke(s)
	}
}

// Subscribe follows sessionID from afterSeq: every later event exactly once,
// in order, first from the store and then live. Close it when done.
func (l *Log) Subscribe(sessionID string, afterSeq int64) *Subscription {
	return l.hub.subscribe(l.st, sessionID, afterSeq, true)
}

// SubscribeLive subscribes to sessionID before the caller commits the
// events it will follow from (a run it starts), so they and what follows
// arrive as they commit, without reading the store back; the caller sets
// where to start with StartAfter once it knows the first one's seq. A gap
// in what arrives (events committed by another process, or more than the
// buffer holds) is read from the store as always.
func (l *Log) SubscribeLive(sessionID string) *Subscription {
	return l.hub.subscribe(l.st, sessionID, 0, false)
}

// Stop refuses new work, commits everything already queued, and returns
// when the writers are idle. Safe to call more than once.
func (l *Log) Stop() {
	l.stop.Do(func() {
		l.mu.Lock()
		l.closing = true
		l.mu.Unlock()
		for _, w := range l.shards {
			close(w.queue)
		}
		for _, s := range l.stopped {
			<-s
		}
		l.hub.closeAll()
	})
}
