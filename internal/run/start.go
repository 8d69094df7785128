package run

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tracing"
)

// Errors Start and Cancel return; they carry the code clients see.
var (
	ErrSessionBusy   = respond.E(http.StatusConflict, "session_busy", "the session already has an active run")
	ErrAgentNotFound = respond.E(http.StatusNotFound, "agent_not_found", "no such agent")
	// ErrSessionNotFound answers for a session that does not exist and for
	// another user's alike, so session ids cannot be probed.
	ErrSessionNotFound = respond.E(http.StatusNotFound, "session_not_found", "no such session")
	// ErrSessionDenied is what StartRun answers for another user's session:
	// the same as for none.
	ErrSessionDenied  = ErrSessionNotFound
	ErrRunNotFound    = respond.E(http.StatusNotFound, "run_not_found", "no such run")
	ErrRunNotActive   = respond.E(http.StatusConflict, "run_not_active", "the run has already ended")
	ErrShuttingDown   = respond.E(http.StatusServiceUnavailable, "shutting_down", "the platform is shutting down")
	ErrInvalidSession = respond.E(http.StatusBadRequest, "invalid_session_id", "session_id must be 1-128 characters of letters, digits, '_', '-', '.', ':'")
	// ErrUserBusy: the user has limits.max_active_runs_per_user root runs
	// that have not ended (DESIGN §15).
	ErrUserBusy = respond.E(http.StatusTooManyRequests, "user_busy", "you already have as many active runs as you may (limits.max_active_runs_per_user); wait until one ends")
	// ErrNotResumable answers an explicit resume (StartParams.ResumeRunID)
	// of a run that is not INPUT_REQUIRED, is another session's or agent's,
	// or was answered already.
	ErrNotResumable = respond.E(http.StatusConflict, "not_resumable", "the run is not waiting for input (it is not INPUT_REQUIRED, or it was answered already)")
)

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.:\-]{1,128}$`)

// AgentSessionPrefix names the per-agent sessions that hold events of
// calls an agent makes outside any run (e.g. an LLM call without x-run-id);
// users cannot create sessions with it.
const AgentSessionPrefix = "agent:"

// AgentSessionID is the session holding agentID's run-less events.
func AgentSessionID(agentID string) string { return AgentSessionPrefix + agentID }

// StartParams is one user message that starts a root run.
//
// Intentions (DESIGN §12): when the session's latest root run ended
// INPUT_REQUIRED with the same agent, the new run resumes it — it gets
// ResumesRunID = that run and its intention — unless NewIntention is set;
// otherwise the run starts a new intention.
type StartParams struct {
	UserID    string
	SessionID string // empty: a new session is created
	AgentID   string
	RequestID string
	Message   agent.Message
	// NewIntention starts a fresh intention even when the session's latest
	// root run waits for input.
	NewIntention bool
	// ResumeRunID resumes exactly that run (an A2A task's latest run),
	// which must be an INPUT_REQUIRED root run of this session, agent and
	// user, not answered yet; otherwise ErrNotResumable.
	ResumeRunID string
	// Agent, when set, is AgentID's row as the caller has just read it
	// (the A2A server does, to check the agent is served): not read again.
	Agent *store.Agent
	// BeforeInvoke, when set, is called by the run before it invokes its
	// agent, with the run's context (the A2A server: until its hold of
	// the session is recorded, which it overlaps with the start's commit).
	// Not kept for a run that is queued (limits.max_active_runs).
	BeforeInvoke func(context.Context)
}

// Started is what Start committed.
type Started struct {
	Run *store.Run
	// Events are user_input, run_started, agent_invoke_started — or, for a
	// run queued under the global cap (Run.Status QUEUED), user_input,
	// run_queued and its state QUEUED.
	Events []store.Event
}

// StartRun creates the session if needed, the run, the transcript entry and
// the opening events in one transaction, then drives the agent in the
// background. A session with an active root run gets ErrSessionBusy.
func (m *Manager) StartRun(ctx context.Context, p StartParams) (*Started, error) {
	m.mu.Lock()
	draining := m.draining
	m.mu.Unlock()
	if draining {
		return nil, ErrShuttingDown
	}
	if p.SessionID != "" && (!sessionIDPattern.MatchString(p.SessionID) || strings.HasPrefix(p.SessionID, AgentSessionPrefix)) {
		return nil, ErrInvalidSession
	}
	ag := p.Agent
	if ag == nil || ag.AgentID != p.AgentID {
		var err error
		ag, err = m.Agent(ctx, p.AgentID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrAgentNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	sessionID := p.SessionID
	if sessionID == "" {
		sessionID = ids.New("ses")
	}
	runID := ids.New("run")
	// The run's span: a child of the caller's traceparent, if it sent one;
	// run_started records its traceparent (DESIGN §14).
	ctx, span := tracing.Start(ctx, "agentplane.run", trace.SpanKindInternal,
		tracing.RunID.String(runID), tracing.SessionID.String(sessionID), tracing.AgentID.String(ag.AgentID))
	traceparent := tracing.Traceparent(ctx)
	now := m.now()
	msg, _ := json.Marshal(p.Message)
	var run *store.Run
	var position int // > 0: queued at this position
	var prevRunID string
	var resumes *store.Run // the run the new one answers, if any
	evs, err := m.log.Do(ctx, sessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		position, resumes = 0, nil
		// The caps' locks first (a user's, then the admission row), in the
		// order every path takes them, before the session's (queue.go).
		if err := m.lockCaps(ctx, tx, p.UserID); err != nil {
			return nil, err
		}
		// A session being deleted takes no new run; asked under the
		// session's row lock, which the deletion's decision takes too
		// (retention, DESIGN §15) — read with the session itself.
		// With the session, the newest run the start reads first (sent
		// with it on PostgreSQL), valid once the session's row is locked.
		first := firstLatest(ag, sessionID, p)
		// Or, in a session this process saw last, checked without waiting.
		sess, prefetched, assumed, err := m.seen.assume(ctx, tx, sessionID, p.UserID, first)
		if err != nil {
			return nil, err
		}
		var purging bool
		if !assumed {
			sess, purging, prefetched, err = tx.SessionGetForRunLatest(ctx, sessionID, first)
		}
		if err != nil {
			first = nil // no session row yet: nothing was read for it
		}
		latest := latestReader(ctx, tx, first, prefetched)
		if errors.Is(err, store.ErrNotFound) {
			_, err = tx.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sessionID, UserID: p.UserID, CreatedAt: now})
			if errors.Is(err, store.ErrConflict) {
				// Another process created it a moment ago, for a run of
				// its own: check that session like any existing one, so
				// the loser gets session_busy, not an internal error.
				sess, err = tx.SessionGet(ctx, sessionID)
			}
			if err == nil {
				// No row: a tombstone may still hold the id.
				purging, err = tx.SessionPurging(ctx, sessionID)
			}
		}
		switch {
		case err != nil:
			return nil, err
		case sess != nil && sess.UserID != p.UserID:
			return nil, ErrSessionDenied
		case purging:
			return nil, ErrSessionNotFound
		}
		resumes, err = m.resumable(ctx, tx, latest, sessionID, ag.AgentID, p)
		if err != nil {
			return nil, err
		}
		intention := ids.New("int")
		if resumes != nil {
			intention = resumes.IntentionID
		}
		if prevRunID, err = previousRun(latest, ag, sessionID, resumes); err != nil {
			return nil, err
		}
		ins := &store.RunInsertParams{RunID: runID, SessionID: sessionID, AgentID: ag.AgentID, UserID: p.UserID, Owner: m.opts.InstanceID, StartedAt: now,
			IntentionID: intention}
		if resumes != nil {
			ins.ResumesRunID = resumes.RunID
		}
		// A conflict aborts the transaction, maybe only at its commit (the
		// INSERT is sent with the statements after it on PostgreSQL): it
		// is told apart below, once the transaction is over.
		if run, err = tx.RunInsertOrAbort(ctx, ins); err != nil {
			return nil, err
		}
		if position, err = m.checkCaps(ctx, tx, run, now); err != nil {
			return nil, err
		}
		if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sessionID, RunID: runID, AgentID: ag.AgentID,
			IntentionID: intention, Role: p.Message.Role, Content: p.Message.Content, CreatedAt: now}); err != nil {
			return nil, err
		}
		if position > 0 {
			run.Status = store.RunQueued
			return queuedEvents(run, p.RequestID, msg, traceparent, position, now), nil
		}
		started, _ := json.Marshal(startedPayload(run, map[string]any{"request_id": p.RequestID, "agent_id": ag.AgentID, "message": json.RawMessage(msg), "traceparent": traceparent}))
		invoked, _ := json.Marshal(map[string]any{"agent_id": ag.AgentID, "endpoint": ag.Endpoint})
		return []store.EventParams{
			{SessionID: sessionID, RunID: runID, TS: now, Type: eventlog.TypeUserInput, Payload: json.RawMessage(`{"message":` + string(msg) + `}`)},
			{SessionID: sessionID, RunID: runID, TS: now, Type: eventlog.TypeRunStarted, Payload: started},
			{SessionID: sessionID, RunID: runID, TS: now, Type: eventlog.TypeAgentInvokeStarted, Payload: invoked},
		}, nil
	})
	if errors.Is(err, store.ErrConflict) {
		err = m.startConflict(ctx, sessionID, resumes)
	}
	if err != nil {
		tracing.End(span, err)
		return nil, err
	}
	m.seen.started(p.UserID, run)
	if position > 0 {
		// Admission starts the run's span proper, as this one's child.
		span.SetAttributes(tracing.Outcome.String("queued"))
		span.End()
		m.queue.sawQueued()
		return &Started{Run: run, Events: evs}, nil // admitted later (queue.go)
	}
	m.started.Inc(run.AgentID)
	m.launch(&job{run: run, ag: ag, message: p.Message, traceparent: traceparent, span: span, prevRunID: prevRunID, beforeInvoke: p.BeforeInvoke})
	return &Started{Run: run, Events: evs}, nil
}

// startConflict tells apart why a start's run could not be inserted: the
// session has an active root run (ErrSessionBusy), or — resuming — another
// message answered the run a moment ago and that answer has ended
// (ErrNotResumable; while it runs the session is busy). The start's
// transaction is over: its insert may have failed only at the commit.
func (m *Manager) startConflict(ctx context.Context, sessionID string, resumes *store.Run) error {
	if resumes != nil {
		last, err := m.st.RunLatest(ctx, &store.RunLatestParams{SessionID: sessionID, RootOnly: true})
		if err == nil && last.ResumesRunID == resumes.RunID && store.RunIsTerminal(last.Status) {
			return ErrNotResumable
		}
	}
	return ErrSessionBusy
}

// resumable returns the run a new root run in sessionID answers, or nil
// when it starts a new intention (see StartParams).
func (m *Manager) resumable(ctx context.Context, tx store.Queries, latest func(*store.RunLatestParams) (*store.Run, error), sessionID, agentID string, p StartParams) (*store.Run, error) {
	if p.ResumeRunID != "" {
		prev, err := tx.RunGet(ctx, p.ResumeRunID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrNotResumable
		}
		if err != nil {
			return nil, err
		}
		if prev.SessionID != sessionID || prev.AgentID != agentID || prev.UserID != p.UserID || prev.ParentRunID != "" ||
			prev.Status != store.RunInputRequired || prev.IntentionID == "" {
			return nil, ErrNotResumable
		}
		return prev, nil
	}
	if p.NewIntention {
		return nil, nil
	}
	prev, err := latest(&store.RunLatestParams{SessionID: sessionID, RootOnly: true})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if prev.Status != store.RunInputRequired || prev.AgentID != agentID || prev.IntentionID == "" {
		return nil, nil
	}
	return prev, nil
}

// job is a run to drive: a root run or a child run alike.
type job struct {
	run         *store.Run
	ag          *store.Agent
	message     agent.Message
	traceparent string
	span        trace.Span // the run's span, ended when the run's driving ends
	// prevRunID (remote A2A agents) is the run whose remote task this one
	// continues (the run it resumes) or whose remote context it joins (the
	// agent's latest run in the session).
	prevRunID string
	// beforeInvoke: StartParams.BeforeInvoke.
	beforeInvoke func(context.Context)
}

// previousRun is a job's prevRunID: read before the new run is inserted,
// in its transaction. Only A2A agents have remote tasks to continue.
func previousRun(latest func(*store.RunLatestParams) (*store.Run, error), ag *store.Agent, sessionID string, resumes *store.Run) (string, error) {
	if ag.Protocol != store.ProtocolA2A {
		return "", nil
	}
	if resumes != nil {
		return resumes.RunID, nil
	}
	prev, err := latest(&store.RunLatestParams{SessionID: sessionID, AgentID: ag.AgentID})
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return prev.RunID, nil
}

// firstLatest is the newest run a start reads first (resumable's, else
// previousRun's), or nil when it reads none.
func firstLatest(ag *store.Agent, sessionID string, p StartParams) *store.RunLatestParams {
	switch {
	case p.ResumeRunID != "":
		return nil // resumable reads that run; previousRun needs nothing then
	case !p.NewIntention:
		return &store.RunLatestParams{SessionID: sessionID, RootOnly: true}
	case ag.Protocol == store.ProtocolA2A:
		return &store.RunLatestParams{SessionID: sessionID, AgentID: ag.AgentID}
	}
	return nil
}

// latestReader reads a session's newest runs in tx, answering first (when
// set) with what was read for it already.
func latestReader(ctx context.Context, tx store.Queries, first *store.RunLatestParams, read *store.Run) func(*store.RunLatestParams) (*store.Run, error) {
	return func(lp *store.RunLatestParams) (*store.Run, error) {
		switch {
		case first == nil || *lp != *first:
			return tx.RunLatest(ctx, lp)
		case read == nil:
			return nil, store.ErrNotFound
		}
		return read, nil
	}
}

// startedPayload adds a root run's intention (and the run it resumes) to
// its run_started payload p.
func startedPayload(run *store.Run, p map[string]any) map[string]any {
	p["intention_id"] = run.IntentionID
	if run.ResumesRunID != "" {
		p["resumes_run_id"] = run.ResumesRunID
	}
	return p
}

// launch registers the run as active and drives it in the background.
func (m *Manager) launch(j *job) {
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &activeRun{cancel: cancel, sessionID: j.run.SessionID}
	if j.span != nil {
		ctx = trace.ContextWithSpan(ctx, j.span)
	}
	m.mu.Lock()
	m.active[j.run.RunID] = a
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer func() {
			if j.span != nil {
				j.span.End()
			}
			cancel(nil)
			m.mu.Lock()
			delete(m.active, j.run.RunID)
			m.mu.Unlock()
			m.wg.Done()
		}()
		m.execute(ctx, j)
	}()
}
