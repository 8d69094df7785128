// Package run is the orchestrator core for runs: starting one (session,
// transcript, events in one transaction), driving the agent's SSE stream into
// the event log, cancelling, shutting down without leaving anything
// half-written, and failing runs whose process died.
package run

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/rowcache"
	"github.com/agentplane/agentplane/internal/store"
)

// Invoker calls an agent (agent.Client in production).
type Invoker interface {
	Invoke(ctx context.Context, endpoint string, req agent.InvokeRequest, h func(agent.StreamEvent) error) (*agent.Result, error)
}

// Options configure a Manager.
type Options struct {
	InstanceID string
	Invoker    Invoker
	Logger     *slog.Logger
	// TranscriptLimit is how many recent messages are sent as messages[].
	TranscriptLimit int
	// MaxTranscriptBytes bounds the content of messages[]: the newest
	// messages that fit, the first one that does not cut with a marker.
	// Default 1 MiB.
	MaxTranscriptBytes int
	// TranscriptCacheBytes bounds the transcripts kept in memory between a
	// session's runs (transcriptcache.go; default 64 MiB, negative: none).
	TranscriptCacheBytes int64
	// MaxOutputBytes and MaxOutputEvents bound what an agent may stream
	// into one run (delta text and state events); past either the run
	// fails output_too_large and the agent's request is closed. Defaults
	// 8 MiB and 100,000.
	MaxOutputBytes  int64
	MaxOutputEvents int
	// Process is the random id of this process start, for which the
	// instance id is claimed (default: the event log's origin). Two
	// processes never share one; they may share an InstanceID only by
	// mistake, and Start refuses that.
	Process string
	// StreamLinger is how long an agent's streamed output may wait for
	// more to share its commit (default streamLinger, 2 ms).
	StreamLinger time.Duration
	// HeartbeatInterval is how often this process refreshes its instance's
	// heartbeat (default 1 s); an owner silent for StaleAfter (default
	// 30 s) is dead and its runs are failed. Orphans are swept every
	// SweepInterval (default 5 s, never more often than heartbeats).
	HeartbeatInterval time.Duration
	StaleAfter        time.Duration
	SweepInterval     time.Duration
	// ClaimWait is how long Start watches a fresh heartbeat of another
	// process under this instance id before concluding that process died
	// (a crash and a quick restart) rather than runs (default four
	// heartbeats).
	ClaimWait time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Metrics, when set, receives run counts and durations.
	Metrics *metrics.Registry
	// Quiesce, when set, is called before a run's result is committed and
	// waits (bounded by its ctx) until work the run caused elsewhere — its
	// LLM calls' trace events — has been queued, so run_done sums it all.
	Quiesce func(ctx context.Context, runID string)
	// OnEnd, when set, runs inside the transaction that ends a run (DONE,
	// FAILED or CANCELLED) and returns events to record before the run's
	// own terminal event; reason says in words how the run ended. The tool
	// service ends the run's waiting tool calls and approvals there, so the
	// cascade commits with the run's end or not at all (DESIGN §2.4). It
	// is not called for a run with no tool call open (store.RunOutlook).
	OnEnd func(ctx context.Context, tx store.Queries, run *store.Run, at int64, reason string) ([]store.EventParams, error)
	// OnChildEnd, when set, runs inside the transaction that ends a child
	// run started by a call_<agent> tool call (run.ToolCallID), after the
	// child's terminal events, and returns the events that settle that
	// call: the tool service finishes it from the child's outcome, so the
	// caller's wait needs nothing in memory and survives restarts. It is not
	// called when the child ends because its parent is ending: the parent's
	// own OnEnd ends the call then.
	OnChildEnd func(ctx context.Context, tx store.Queries, child *store.Run, at int64, end End) ([]store.EventParams, error)
	// MaxCallDepth refuses child runs deeper than this with
	// max_depth_exceeded (AGENTPLANE_MAX_CALL_DEPTH); 0 means no limit.
	MaxCallDepth int
	// MaxActiveRunsPerUser refuses a user's root run while the user has
	// this many that have not ended (queued ones included) with 429
	// user_busy; MaxActiveRuns queues root runs started while this many
	// run, first in first out (queue.go). 0: no cap. Both count root runs
	// across every replica sharing the database.
	MaxActiveRunsPerUser int
	MaxActiveRuns        int
	// QueueInterval is how often queued runs are looked at for a free slot
	// (one freed here is filled at once) and their positions told (default
	// 250 ms).
	QueueInterval time.Duration
}

// Manager starts and drives runs.
type Manager struct {
	log  *eventlog.Log
	st   store.Store
	opts Options

	mu       sync.Mutex
	active   map[string]*activeRun
	draining bool
	wg       sync.WaitGroup

	started  *metrics.CounterVec
	finished *metrics.CounterVec
	duration *metrics.HistogramVec

	bgCancel context.CancelFunc
	bgDone   chan struct{}
	stopOnce sync.Once

	queue runQueue // queue.go

	remote remoteRefs // remotetask.go

	// remoteCancels counts the tasks/cancel the orphan sweep sent and
	// nothing else waits for (recover.go); Shutdown waits for them.
	remoteCancels sync.WaitGroup

	transcripts *transcriptCache // transcriptcache.go

	agents rowcache.Cache[*store.Agent] // agents.go

	seen seenSessions // seen.go
}

type activeRun struct {
	cancel    context.CancelCauseFunc
	sessionID string
	checking  atomic.Bool // a check for an end elsewhere is under way

	mu    sync.Mutex // orders delta appends against Cancel
	ended bool       // set by Cancel under mu

	// traceparent is the agent invoke span's, once the agent is being
	// invoked (InvokeTraceparent); guarded by Manager.mu.
	traceparent string
}

// InvokeTraceparent is the traceparent the agent of a run driven by this
// process was invoked with, "" when the run is not being invoked here. The
// LLM proxy parents a call that carries no traceparent of its own to it, so
// an agent that does not pass the header on still lands in its run's trace.
func (m *Manager) InvokeTraceparent(runID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.active[runID]; a != nil {
		return a.traceparent
	}
	return ""
}

// storeListAll lists every active run for the orphan sweep.
var storeListAll = store.RunListActiveParams{Limit: 10000}

// Cancellation causes, so the run loop knows who ended it.
var (
	errCancelledByUser = errors.New("cancelled")
	errShutdown        = errors.New("platform shutting down")
	errEndedElsewhere  = errors.New("run ended elsewhere")
)

// New makes a Manager; call Start to begin heartbeats and the sweeper.
func New(log *eventlog.Log, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TranscriptLimit <= 0 {
		opts.TranscriptLimit = 200
	}
	if opts.MaxTranscriptBytes <= 0 {
		opts.MaxTranscriptBytes = 1 << 20
	}
	if opts.TranscriptCacheBytes == 0 {
		opts.TranscriptCacheBytes = transcriptCacheBytes
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = 8 << 20
	}
	if opts.MaxOutputEvents <= 0 {
		opts.MaxOutputEvents = 100_000
	}
	if opts.StreamLinger <= 0 {
		opts.StreamLinger = streamLinger
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = time.Second
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 30 * time.Second
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = max(5*time.Second, opts.HeartbeatInterval)
	}
	if opts.ClaimWait <= 0 {
		opts.ClaimWait = 4 * opts.HeartbeatInterval
	}
	if opts.Process == "" {
		opts.Process = log.Origin()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.QueueInterval <= 0 {
		opts.QueueInterval = 250 * time.Millisecond
	}
	m := &Manager{log: log, st: log.Store(), opts: opts, active: map[string]*activeRun{}, queue: runQueue{wake: make(chan struct{}, 1)},
		transcripts: newTranscriptCache(opts.TranscriptCacheBytes, opts.Metrics)}
	m.agents.TTL = agentRowTTL
	log.Observe(nil, m.heardAgentsChanged)
	log.Observe(m.committed, m.movedElsewhere)
	log.Observe(m.queueCommitted, m.queueMovedElsewhere)
	m.started = metrics.RunsStarted(opts.Metrics)
	m.finished = metrics.RunsFinished(opts.Metrics)
	m.duration = metrics.RunDuration(opts.Metrics)
	opts.Metrics.GaugeFunc("agentplane_runs_active", "Runs this process is driving.", func() float64 { return float64(m.ActiveRuns()) })
	return m
}

// ended records a run's terminal transition in the metrics. (A run a tool
// call fails is recorded by the tool service, which ends it.)
func (m *Manager) ended(r *store.Run, status, code string, at int64) {
	cause := metrics.CauseAgent
	switch {
	case status == store.RunCancelled:
		cause = metrics.CauseCancel
	case strings.HasPrefix(code, "platform_"):
		cause = metrics.CausePlatform
	}
	m.finished.Inc(r.AgentID, status, code, cause)
	m.duration.Observe(float64(at-r.StartedAt)/1000, r.AgentID, status)
}

func (m *Manager) now() int64 { return m.opts.Now().UnixMilli() }

// Start claims the instance id for this process (refusing to start while
// another live process holds it), fails the runs a previous process with
// this instance id left unfinished, then keeps a heartbeat and sweeps runs
// of dead instances.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.claim(ctx); err != nil {
		return err
	}
	if _, err := m.failOrphans(ctx, true); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.bgCancel = cancel
	m.bgDone = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); m.heartbeat(bg) }()
	go func() { defer wg.Done(); m.sweep(bg) }()
	go func() { defer wg.Done(); m.queueLoop(bg) }()
	go func() { wg.Wait(); close(m.bgDone) }()
	return nil
}

// heartbeat refreshes the instance's heartbeat on its own goroutine, so a
// long orphan sweep never makes this process look dead. Each beat is a
// claim: a process that finds its id taken over says so loudly.
func (m *Manager) heartbeat(ctx context.Context) {
	t := time.NewTicker(m.opts.HeartbeatInterval)
	defer t.Stop()
	lost := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := m.now()
		held, err := m.st.InstanceClaim(ctx, &store.InstanceClaimParams{InstanceID: m.opts.InstanceID, Process: m.opts.Process,
			At: now, AliveSince: now - m.opts.StaleAfter.Milliseconds()})
		switch {
		case errors.Is(err, store.ErrConflict):
			if !lost {
				m.opts.Logger.Error("another agentplane process took over this instance id (this one missed its heartbeats); both now act as one, so give each its own AGENTPLANE_INSTANCE_ID",
					"instance_id", m.opts.InstanceID, "process", m.opts.Process, "holder", held.Process)
			}
			lost = true
		case err != nil:
			if ctx.Err() == nil {
				m.opts.Logger.Warn("instance heartbeat failed", "err", err)
			}
		default:
			lost = false
		}
	}
}

func (m *Manager) sweep(ctx context.Context) {
	t := time.NewTicker(m.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := m.failOrphans(ctx, false); err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("orphan sweep failed", "err", err)
			}
		}
	}
}

// Shutdown stops taking runs, lets in-flight ones finish until ctx ends,
// then cancels the rest, which are failed with code platform_shutdown.
// It returns when every run loop has written its last event and, until
// ctx ends, the orphan sweep's remote tasks/cancel calls have returned.
func (m *Manager) Shutdown(ctx context.Context) {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		m.draining = true
		m.mu.Unlock()
		idle := make(chan struct{})
		go func() { m.wg.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-ctx.Done():
			m.mu.Lock()
			for _, a := range m.active {
				a.cancel(errShutdown)
			}
			m.mu.Unlock()
			<-idle
		}
		if m.bgCancel != nil {
			m.bgCancel()
			<-m.bgDone
			// Every run has ended: the next process with this id may
			// start at once.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := m.st.InstanceRelease(rctx, m.opts.InstanceID, m.opts.Process); err != nil {
				m.opts.Logger.Warn("release instance id", "instance_id", m.opts.InstanceID, "err", err)
			}
			cancel()
		}
		// The sweep has stopped, so no cancel starts now: let those under
		// way reach their remotes before the process exits, or the remote
		// tasks keep running; but no longer than the caller's grace (a
		// dead remote holds each for a2aremote's CancelTimeout).
		sent := make(chan struct{})
		go func() { m.remoteCancels.Wait(); close(sent) }()
		select {
		case <-sent:
		case <-ctx.Done():
		}
	})
}

// ActiveRuns is the number of runs this process is driving.
func (m *Manager) ActiveRuns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.active)
}

// Guard runs fn, which may end runID from outside the run loop (a tool
// call's failure failing the run), while holding the run's append lock.
// When fn reports the run ended, the agent's request is closed and nothing
// more of its stream is recorded, so no delta lands after run_failed.
func (m *Manager) Guard(runID string, fn func() (ended bool, err error)) error {
	m.mu.Lock()
	a := m.active[runID]
	m.mu.Unlock()
	if a == nil {
		_, err := fn()
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ended, err := fn()
	if ended && !a.ended {
		a.ended = true
		a.cancel(errEndedElsewhere)
	}
	return err
}

// onEnd returns the cascade events for a run ending at at (nil without a hook).
func (m *Manager) onEnd(ctx context.Context, tx store.Queries, run *store.Run, at int64, reason string) ([]store.EventParams, error) {
	if m.opts.OnEnd == nil {
		return nil, nil
	}
	return m.opts.OnEnd(ctx, tx, run, at, reason)
}

// movedElsewhere hears that other processes wrote into sessions (nil: any
// session). A run this process drives may have been ended there — cancelled
// through another replica, or failed by a tool call made through one — so
// each such run is checked against the store and, if it ended, its agent
// request is closed. (Its late output is dropped at commit in any case:
// deltas are appended IfRunActive.)
func (m *Manager) movedElsewhere(sessionIDs []string) {
	var set map[string]bool
	if sessionIDs != nil {
		set = make(map[string]bool, len(sessionIDs))
		for _, id := range sessionIDs {
			set[id] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for runID, a := range m.active {
		if (set == nil || set[a.sessionID]) && a.checking.CompareAndSwap(false, true) {
			go m.checkEnded(runID, a)
		}
	}
}

func (m *Manager) checkEnded(runID string, a *activeRun) {
	defer a.checking.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := m.st.RunGet(ctx, runID)
	if err != nil || !store.RunIsTerminal(r.Status) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ended {
		a.ended = true
		a.cancel(errEndedElsewhere)
	}
}
