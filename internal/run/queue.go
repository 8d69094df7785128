package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tracing"
)

// Run caps and the queue (issue 14, DESIGN §15).
//
// A user has at most MaxActiveRunsPerUser root runs that have not ended
// (queued ones included): one more is refused 429 user_busy. The platform
// runs at most MaxActiveRuns root runs at once: a root run started while
// that many run — or while others wait — is inserted QUEUED, its client is
// told state QUEUED {position}, and it is admitted first in first out as
// slots free. Child runs are never queued nor counted: they belong to a
// root already admitted.
//
// Both caps hold across replicas: the start's transaction counts under row
// locks every start and admission takes (the user's row in user_locks, the
// one row of run_admission), in that order, before the session's row. The
// queue lives in the runs table, so it survives restarts; any process
// admits (it becomes the run's owner and invokes the agent). A slot freed
// by a run this process ends is filled at once; one freed elsewhere within
// a QueueInterval (or at once, when that process's notification arrives).

// runQueue is this process's side of the queue.
type runQueue struct {
	wake chan struct{} // a slot may have freed, or a run was queued
	// nonEmpty: the last look found queued runs (or this process queued
	// one): only then do other processes' commits wake the admitter.
	nonEmpty atomic.Bool
	lastTold time.Time // positions were last told (queueLoop only)
}

func (q *runQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *runQueue) sawQueued() { q.nonEmpty.Store(true); q.poke() }

// Bounds of one pass of the admitter.
const (
	// admitBatch bounds the admissions of one pass (it goes round again).
	admitBatch = 100
	// positionsTold is how many queued runs, from the head, are told their
	// position each time it changes; the others learn theirs when they
	// move up.
	positionsTold = 100
)

// lockCaps takes the caps' row locks: the user's, then the admission row.
func (m *Manager) lockCaps(ctx context.Context, tx store.Queries, userID string) error {
	if m.opts.MaxActiveRunsPerUser > 0 {
		if err := tx.UserLock(ctx, userID); err != nil {
			return err
		}
	}
	if m.opts.MaxActiveRuns > 0 {
		return tx.RunAdmissionLock(ctx)
	}
	return nil
}

// checkCaps decides, under the caps' locks, what becomes of run, a root
// run just inserted RUNNING: ErrUserBusy (the transaction rolls back),
// queued at the returned position (> 0), or started (0).
func (m *Manager) checkCaps(ctx context.Context, tx store.Queries, run *store.Run, now int64) (int, error) {
	if limit := m.opts.MaxActiveRunsPerUser; limit > 0 {
		n, err := tx.RunUserActiveRoots(ctx, run.UserID, run.RunID)
		if err != nil {
			return 0, err
		}
		if n >= limit {
			e := *ErrUserBusy
			e.Message = fmt.Sprintf("user %s already has %d active run(s), the most allowed (limits.max_active_runs_per_user); wait until one ends", run.UserID, n)
			e.Details = map[string]any{"max_active_runs_per_user": limit}
			return 0, &e
		}
	}
	limit := m.opts.MaxActiveRuns
	if limit <= 0 {
		return 0, nil
	}
	running, queued, err := tx.RunQueueCounts(ctx, run.RunID)
	if err != nil {
		return 0, err
	}
	if queued == 0 && running < limit {
		return 0, nil
	}
	// Behind everyone already waiting, even if a slot is free this instant:
	// first in, first out.
	position := queued + 1
	return position, tx.RunEnqueue(ctx, run.RunID, now, position)
}

// queuedEvents record a queued start: user_input, run_queued (trace; it
// keeps what admission needs to start the run) and the client's state.
func queuedEvents(run *store.Run, requestID string, msg json.RawMessage, traceparent string, position int, now int64) []store.EventParams {
	queued, _ := json.Marshal(map[string]any{"request_id": requestID, "agent_id": run.AgentID, "message": msg, "traceparent": traceparent, "position": position})
	return []store.EventParams{
		{SessionID: run.SessionID, RunID: run.RunID, TS: now, Type: eventlog.TypeUserInput, Payload: json.RawMessage(`{"message":` + string(msg) + `}`)},
		{SessionID: run.SessionID, RunID: run.RunID, TS: now, Type: eventlog.TypeRunQueued, Payload: queued},
		queuedState(run, requestID, msg, position, now),
	}
}

// queuedState is a queued run's state QUEUED {position}. The first, written as the run is
// queued (msg set), names the invoke's request_id and carries its message, as run_started
// does: it is the invoke's answer until the run is admitted, or the only one if it is
// cancelled while it waits — and the only event a client is sent that holds the user's
// message then, so a session reloaded or replayed shows it above the run. Later positions
// (msg nil) carry neither.
func queuedState(run *store.Run, requestID string, msg json.RawMessage, position int, now int64) store.EventParams {
	p := map[string]any{"state": store.RunQueued, "detail": map[string]any{"position": position}, "source": eventlog.StateSourcePlatform}
	if requestID != "" {
		p["request_id"] = requestID
	}
	if msg != nil {
		p["message"] = msg
	}
	b, _ := json.Marshal(p)
	return store.EventParams{SessionID: run.SessionID, RunID: run.RunID, TS: now, Type: eventlog.TypeState, Payload: b}
}

// queueCommitted is a commit hook: a root run that ended here frees a slot
// (or leaves the queue), so the admitter looks at once — when there is a
// slot to fill: with no MaxActiveRuns here and no queued run seen, a run's
// end has nothing to admit, and the look would cost every run a statement
// (runs queued by a process with a cap are still admitted, by the next
// QueueInterval or that process's notification).
func (m *Manager) queueCommitted(evs []store.Event) {
	if m.opts.MaxActiveRuns <= 0 && !m.queue.nonEmpty.Load() {
		return
	}
	for i := range evs {
		if eventlog.IsRunEnd(evs[i].Type) && evs[i].ParentRunID == "" {
			m.queue.poke()
			return
		}
	}
}

// queueMovedElsewhere hears other processes' commits: while runs wait, one
// of them may have freed a slot.
func (m *Manager) queueMovedElsewhere([]string) {
	if m.queue.nonEmpty.Load() {
		m.queue.poke()
	}
}

// queueLoop admits queued runs when woken and every QueueInterval, and
// tells queued runs their positions at most once per interval.
func (m *Manager) queueLoop(ctx context.Context) {
	t := time.NewTicker(m.opts.QueueInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.queue.wake:
		}
		if err := m.admitQueued(ctx); err != nil && ctx.Err() == nil {
			m.opts.Logger.Warn("run queue: admission failed", "err", err)
		}
		if m.queue.nonEmpty.Load() && time.Since(m.queue.lastTold) >= m.opts.QueueInterval {
			m.queue.lastTold = time.Now()
			if err := m.tellPositions(ctx); err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("run queue: telling positions failed", "err", err)
			}
		}
	}
}

// Why an admission did not happen.
var (
	errNoSlot = errors.New("no free slot")
	errMoved  = errors.New("the queue moved")
)

// admitQueued admits queued runs, oldest first, while slots are free (all
// of them when no cap is set any more).
func (m *Manager) admitQueued(ctx context.Context) error {
	for range admitBatch {
		m.mu.Lock()
		draining := m.draining
		m.mu.Unlock()
		if draining {
			return nil
		}
		head, err := m.st.RunQueueHead(ctx, 1)
		if err != nil {
			return err
		}
		if len(head) == 0 {
			m.queue.nonEmpty.Store(false)
			return nil
		}
		m.queue.nonEmpty.Store(true)
		switch err := m.admit(ctx, head[0]); {
		case errors.Is(err, errNoSlot):
			return nil
		case errors.Is(err, errMoved):
			continue // admitted or cancelled meanwhile: look again
		case err != nil:
			return err
		}
	}
	m.queue.poke() // more may be due: go round again
	return nil
}

// queuedInput is what a queued run's run_queued kept to start it with.
type queuedInput struct {
	RequestID   string          `json:"request_id"`
	Message     json.RawMessage `json:"message"`
	Traceparent string          `json:"traceparent"`
}

// admit starts the queued run q if a slot is free and q is still the
// head: QUEUED → RUNNING (this process its owner) with its run_started in
// one transaction under the admission lock, then its agent is invoked.
func (m *Manager) admit(ctx context.Context, q *store.QueuedRun) error {
	if limit := m.opts.MaxActiveRuns; limit > 0 {
		// Unlocked first look: while every slot is taken, the transaction
		// (and a rollback shared with the log's batch) is not worth it.
		running, _, err := m.st.RunQueueCounts(ctx, "")
		if err != nil {
			return err
		}
		if running >= limit {
			return errNoSlot
		}
	}
	evs, err := m.st.EventsList(ctx, &store.EventsListParams{SessionID: q.SessionID, RunID: q.RunID, Type: eventlog.TypeRunQueued, Limit: 1})
	if err != nil {
		return err
	}
	var in queuedInput
	if len(evs) == 1 {
		_ = json.Unmarshal(evs[0].Payload, &in)
	}
	var msg agent.Message
	if err := json.Unmarshal(in.Message, &msg); err != nil || len(evs) != 1 {
		return m.failQueued(ctx, q, "platform_error", "the queued run's input could not be read")
	}
	ag, err := m.st.AgentGet(ctx, q.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		return m.failQueued(ctx, q, "agent_not_found", "agent "+q.AgentID+" was deleted while the run was queued")
	}
	if err != nil {
		return err
	}
	// The run's span continues the trace of its queued start. Not ended
	// unless the run is admitted: a try that finds no slot exports nothing.
	sctx, span := tracing.Start(tracing.WithTraceparent(ctx, in.Traceparent), "agentplane.run", trace.SpanKindInternal,
		tracing.RunID.String(q.RunID), tracing.SessionID.String(q.SessionID), tracing.AgentID.String(q.AgentID))
	in.Traceparent = tracing.Traceparent(sctx)
	now := m.now()
	var run *store.Run
	_, err = m.log.Do(ctx, q.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		run = nil
		if limit := m.opts.MaxActiveRuns; limit > 0 {
			if err := tx.RunAdmissionLock(ctx); err != nil {
				return nil, err
			}
			running, _, err := tx.RunQueueCounts(ctx, "")
			if err != nil {
				return nil, err
			}
			if running >= limit {
				return nil, errNoSlot
			}
			head, err := tx.RunQueueHead(ctx, 1)
			if err != nil {
				return nil, err
			}
			if len(head) == 0 || head[0].RunID != q.RunID {
				return nil, errMoved
			}
		}
		r, err := tx.RunAdmit(ctx, &store.RunAdmitParams{RunID: q.RunID, Owner: m.opts.InstanceID, At: now})
		if errors.Is(err, store.ErrConflict) {
			return nil, errMoved
		}
		if err != nil {
			return nil, err
		}
		run = r
		waited := now - q.QueuedAt
		state, _ := json.Marshal(map[string]any{"state": store.RunRunning, "detail": map[string]any{"queued_ms": waited}, "source": eventlog.StateSourcePlatform})
		started, _ := json.Marshal(startedPayload(r, map[string]any{"request_id": in.RequestID, "agent_id": ag.AgentID, "message": in.Message, "traceparent": in.Traceparent, "queued_ms": waited}))
		invoked, _ := json.Marshal(map[string]any{"agent_id": ag.AgentID, "endpoint": ag.Endpoint})
		return []store.EventParams{
			{SessionID: r.SessionID, RunID: r.RunID, TS: now, Type: eventlog.TypeState, Payload: state},
			{SessionID: r.SessionID, RunID: r.RunID, TS: now, Type: eventlog.TypeRunStarted, Payload: started},
			{SessionID: r.SessionID, RunID: r.RunID, TS: now, Type: eventlog.TypeAgentInvokeStarted, Payload: invoked},
		}, nil
	})
	if err != nil {
		return err
	}
	m.opts.Logger.Info("admitted a queued run", "run_id", run.RunID, "session_id", run.SessionID, "queued_ms", now-q.QueuedAt)
	m.mu.Lock()
	draining := m.draining
	m.mu.Unlock()
	if draining {
		// Admitted as the shutdown began: it will not be driven here.
		tracing.End(span, errors.New("platform_shutdown"))
		return m.fail(context.WithoutCancel(ctx), run, "platform_shutdown", "the platform shut down as the run was admitted", nil)
	}
	m.started.Inc(run.AgentID)
	m.launch(&job{run: run, ag: ag, message: msg, traceparent: in.Traceparent, span: span})
	return nil
}

// failQueued ends a queued run that cannot be started.
func (m *Manager) failQueued(ctx context.Context, q *store.QueuedRun, code, message string) error {
	r, err := m.st.RunGet(ctx, q.RunID)
	if err != nil {
		return err
	}
	m.opts.Logger.Warn("failed a queued run", "run_id", q.RunID, "session_id", q.SessionID, "code", code)
	if err := m.fail(ctx, r, code, message, nil); err != nil {
		return err
	}
	return errMoved
}

// tellPositions tells the first positionsTold queued runs whose position
// changed their new one (state QUEUED {position}), each change guarded on
// the position last told, so replicas telling at once record it once.
func (m *Manager) tellPositions(ctx context.Context) error {
	head, err := m.st.RunQueueHead(ctx, positionsTold)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(head))
	now := m.now()
	for i, q := range head {
		want := i + 1
		if q.Position == want {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.log.Do(ctx, q.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
				ok, err := tx.RunQueuePositionSet(ctx, q.RunID, q.Position, want)
				if err != nil || !ok {
					return nil, err
				}
				return []store.EventParams{queuedState(&store.Run{RunID: q.RunID, SessionID: q.SessionID}, "", nil, want, now)}, nil
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
