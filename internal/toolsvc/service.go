// Package toolsvc runs tool calls as durable state machines (DESIGN §6–§8,
// issue 4): the registry, invoke / get / wait, the policy decision, human
// approvals, server tools (POSTed by this process) and client tools (sent
// to the user's client through the ingress), durable deadlines and the
// cascade when a run ends.
//
// Every state change is a guarded transition committed through the event
// log together with the event that records it, so a tool call is claimed
// to run at most once whoever races for it (concurrent waits, approvers,
// the deadline sweeper of any replica), and a long-poll is woken by the
// committed event itself — locally by the log's commit hook, across
// replicas by the PostgreSQL notification — never by polling the store.
package toolsvc

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

// RunGuard is what the tool service needs of the run manager
// (run.Manager): closing a run's agent request when something outside the
// run loop ends the run, ending a run inside a tool transaction, and
// starting the child run of a call_<agent> call.
type RunGuard interface {
	Guard(runID string, fn func() (ended bool, err error)) error
	// EndTx ends a run in the caller's transaction with everything its end
	// implies (its descendants, its calls, its caller's call).
	EndTx(ctx context.Context, tx store.Queries, r *store.Run, at int64, end run.End) ([]store.EventParams, []*store.Run, error)
	// BeginChild starts a child run in the caller's transaction; launch
	// runs after the commit.
	BeginChild(ctx context.Context, tx store.Queries, parent *store.Run, p run.ChildParams) (*run.ChildStarted, []store.EventParams, func(), error)
	// CheckLink refuses a call the caller's links or the depth limit forbid.
	CheckLink(ctx context.Context, q store.Queries, parent *store.Run, agentID string) error
	// Agent reads an agent's row, kept briefly (run.Manager.Agent).
	Agent(ctx context.Context, agentID string) (*store.Agent, error)
	// InvokeTraceparent is the traceparent of a run's agent invoke on this
	// process ("" if none): the parent of a tool call's spans when the
	// agent sent none, or when the call goes on later (an approval, a
	// sweep), so a run stays one trace.
	InvokeTraceparent(runID string) string
}

// Options configure a Service. Zero values pick defaults.
type Options struct {
	Logger *slog.Logger
	// HTTP calls server tools. It must re-check the endpoint allowlist when
	// it dials (agent.NewHTTPClient), as agent endpoints are.
	HTTP *http.Client
	// Allow checks a server tool's endpoint when it is registered.
	Allow *agent.Allowlist
	// ClientConnected reports whether a client of the session is connected
	// to this process or any other (the ingress, then the store's presence
	// rows). It is asked inside the transaction that dispatches the call,
	// and q is that transaction: a store read must go through q (on SQLite
	// it holds the only writer connection). An error aborts the dispatch.
	// Nil means no client ever is: client tools fail with client_offline.
	ClientConnected func(ctx context.Context, q store.Queries, sessionID string) (bool, error)
	// Runs, when set, stops the agent stream of a run a tool call fails,
	// ends runs with their trees, and runs call_<agent> calls (without it
	// they fail sub_agent_failed).
	Runs RunGuard
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Metrics receives tool call counts and durations.
	Metrics *metrics.Registry
	// SweepInterval is how often deadlines are enforced. Default 250 ms.
	SweepInterval time.Duration
	// InlineWait bounds how long invoke waits for an allowed server tool
	// before answering pending. Default 30 s.
	InlineWait time.Duration
	// InstanceID names this process's instance; with StaleAfter (default
	// 30 s, the run manager's) it tells other replicas whether the holder
	// of a redacted call's real arguments is alive (redact.go).
	InstanceID string
	StaleAfter time.Duration
}

// Service is the tool-call orchestrator of one process.
type Service struct {
	log  *eventlog.Log
	st   store.Store
	opts Options

	registry   registry
	agentTools agentTools
	waiters    *waiters
	inflight   mcpInflight
	held       heldArgs // real args of redacted calls (redact.go)
	runs       runFacts // what never changes about runs (runfacts.go)

	execCtx    context.Context
	execCancel context.CancelFunc
	workers    *workers // run the sends of claimed calls (workers.go)
	execWG     sync.WaitGroup

	calls    *metrics.CounterVec
	duration *metrics.HistogramVec
	offline  *metrics.CounterVec
	waited   *metrics.HistogramVec
	runsEnd  *metrics.CounterVec
	runsDur  *metrics.HistogramVec

	bgCancel context.CancelFunc
	bgDone   chan struct{}
	stopOnce sync.Once
}

// New makes a Service and hooks it to the log; call Start to run the
// deadline sweeper.
func New(log *eventlog.Log, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTP == nil {
		opts.HTTP = http.DefaultClient
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 250 * time.Millisecond
	}
	if opts.InlineWait <= 0 {
		opts.InlineWait = 30 * time.Second
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 30 * time.Second
	}
	s := &Service{log: log, st: log.Store(), opts: opts, waiters: newWaiters()}
	s.registry.st = s.st
	s.registry.rows.TTL = toolRowTTL
	s.execCtx, s.execCancel = context.WithCancel(context.Background())
	s.workers = newWorkers(s.execCtx.Done(), workerKeep)
	s.calls, s.duration = metrics.ToolCalls(opts.Metrics), metrics.ToolCallDuration(opts.Metrics)
	s.offline, s.waited = metrics.ClientOffline(opts.Metrics), metrics.ApprovalWait(opts.Metrics)
	s.runsEnd, s.runsDur = metrics.RunsFinished(opts.Metrics), metrics.RunDuration(opts.Metrics)
	opts.Metrics.GaugeFunc("agentplane_tool_waits_pending", "Long-polls (:wait and inline invoke waits) this process holds.", func() float64 { return float64(s.waiters.count()) })
	log.Observe(s.committed, s.remoteMoved)
	log.Observe(nil, s.remoteEnded)
	log.Observe(nil, s.heardToolsChanged)
	return s
}

// SetClientConnected sets the presence check once the ingress exists
// (it is built after the service).
func (s *Service) SetClientConnected(fn func(ctx context.Context, q store.Queries, sessionID string) (bool, error)) {
	s.opts.ClientConnected = fn
}

// SetRuns sets the run guard once the run manager exists (it takes the
// service's OnRunEnd hook, so it is built after the service).
func (s *Service) SetRuns(r RunGuard) { s.opts.Runs = r }

func (s *Service) now() int64 { return s.opts.Now().UnixMilli() }

// Start runs the deadline sweeper until Stop.
func (s *Service) Start(ctx context.Context) error {
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.bgCancel = cancel
	s.bgDone = make(chan struct{})
	go s.sweepLoop(bg)
	return nil
}

// Stop ends the sweeper and aborts server tool requests in flight (their
// calls are left for the deadline to settle, by this or another process).
// Safe to call more than once.
func (s *Service) Stop() {
	s.stopOnce.Do(func() {
		if s.bgCancel != nil {
			s.bgCancel()
			<-s.bgDone
		}
		s.execCancel()
		s.execWG.Wait()
	})
}

// remoteMoved wakes long-polls of sessions another process changed.
func (s *Service) remoteMoved(sessionIDs []string) {
	s.waiters.wakeSessions(sessionIDs)
	if s.HeldArgs() > 0 {
		// A redacted call of ours may have been approved over there.
		go s.claimHeld(s.execCtx, sessionIDs)
	}
}
