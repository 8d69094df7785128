package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tracing"
)

// Errors StartChild returns (DESIGN §11), checked in this order.
var (
	ErrRunForbidden     = respond.E(http.StatusForbidden, "forbidden", "x-run-id names a run that is not this agent's")
	ErrAgentNotLinked   = respond.E(http.StatusForbidden, "agent_not_linked", "the agent is not in the calling agent's linked_agents")
	ErrMaxDepth         = respond.E(http.StatusConflict, "max_depth_exceeded", "the call would pass AGENTPLANE_MAX_CALL_DEPTH")
	ErrChildKeyConflict = respond.E(http.StatusConflict, "idempotency_conflict", "the idempotency key was used in this run for a call of another agent or with another message")
)

// MaxChildKeyLen bounds an idempotency key of a child invoke.
const MaxChildKeyLen = 200

// inputSummaryLen bounds sub_agent_call_start's input_summary, in bytes.
const inputSummaryLen = 200

// ChildParams is one agent calling another through the platform: a child
// run of ParentRunID in the same session (DESIGN §11).
type ChildParams struct {
	// CallerAgentID is the agent whose key made the call; ParentRunID must
	// be one of its runs.
	CallerAgentID string
	ParentRunID   string
	// AgentID is the agent to run; it must be in the caller's
	// linked_agents.
	AgentID string
	Message agent.Message
	// IdempotencyKey (direct form): the same key in one caller run starts
	// one child, whoever retries.
	IdempotencyKey string
	// ToolCallID (tool form): the call_<agent> tool call whose execution
	// the child is; its id is the child's key.
	ToolCallID string
}

// ChildStarted is the child a call started, or found when the key had
// started it before (Created false).
type ChildStarted struct {
	Run     *store.Run
	Created bool
	// FirstSeq is the seq of the child's first event (its user_input), so
	// a caller streaming the child follows its session from just before it.
	FirstSeq int64
}

// childKey is the child's idempotency key within its parent.
func (p *ChildParams) childKey() string {
	if p.ToolCallID != "" {
		return "tool:" + p.ToolCallID
	}
	return p.IdempotencyKey
}

// StartChild starts the direct form's child (POST
// /v1/agents/{agent_id}:invoke): the run, its transcript row and opening
// events in one transaction of the session, then its agent in the
// background, exactly as a root run. A key used before returns the child
// it started (Created false), whatever state it is in.
func (m *Manager) StartChild(ctx context.Context, p ChildParams) (*ChildStarted, error) {
	if len(p.IdempotencyKey) > MaxChildKeyLen {
		return nil, respond.E(http.StatusBadRequest, "invalid_request", fmt.Sprintf("idempotency_key is longer than %d bytes", MaxChildKeyLen))
	}
	parent, err := m.st.RunGet(ctx, p.ParentRunID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && parent.AgentID != p.CallerAgentID) {
		return nil, ErrRunForbidden
	}
	if err != nil {
		return nil, err
	}
	var started *ChildStarted
	var launch func()
	caller := trace.SpanContextFromContext(ctx) // the child's span's parent; the log's ctx does not carry it
	evs, err := m.log.Do(ctx, parent.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		if caller.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, caller)
		}
		locked, err := tx.RunLock(ctx, parent.RunID)
		if err != nil {
			return nil, err
		}
		var evs []store.EventParams
		started, evs, launch, err = m.BeginChild(ctx, tx, locked, p)
		return evs, err
	})
	if err != nil {
		return nil, err
	}
	if !started.Created {
		first, err := m.st.EventsList(ctx, &store.EventsListParams{SessionID: started.Run.SessionID, RunID: started.Run.RunID, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(first) > 0 {
			started.FirstSeq = first[0].Seq
		}
		return started, nil
	}
	for _, e := range evs {
		if e.RunID == started.Run.RunID {
			started.FirstSeq = e.Seq
			break
		}
	}
	launch()
	return started, nil
}

// BeginChild starts a child run inside tx, the caller's transaction of
// the parent's session, which holds parent's row lock (the tool service
// dispatching a call_<agent> call, or StartChild). It returns the events
// to append with it and launch, which drives the child's agent and must be
// called once tx has committed (nil when no child was created). A refusal
// is a *respond.Error: forbidden, run_not_active, agent_not_found,
// agent_not_linked, max_depth_exceeded, idempotency_conflict.
func (m *Manager) BeginChild(ctx context.Context, tx store.Queries, parent *store.Run, p ChildParams) (*ChildStarted, []store.EventParams, func(), error) {
	m.mu.Lock()
	draining := m.draining
	m.mu.Unlock()
	if draining {
		return nil, nil, nil, ErrShuttingDown
	}
	if parent.AgentID != p.CallerAgentID {
		return nil, nil, nil, ErrRunForbidden
	}
	if store.RunIsTerminal(parent.Status) {
		return nil, nil, nil, ErrRunNotActive
	}
	ag, err := tx.AgentGet(ctx, p.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, ErrAgentNotFound
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if err := m.CheckLink(ctx, tx, parent, p.AgentID); err != nil {
		return nil, nil, nil, err
	}
	now := m.now()
	runID := ids.New("run")
	// A child is part of its parent's intention. When the called agent's
	// latest run in that intention asked for input, this call is the
	// answer: the child resumes it (DESIGN §12) — how a caller continues a
	// remote A2A task it was asked about.
	resumes := ""
	if parent.IntentionID != "" {
		prev, err := tx.RunLatest(ctx, &store.RunLatestParams{SessionID: parent.SessionID, AgentID: ag.AgentID, IntentionID: parent.IntentionID})
		switch {
		case err == nil && prev.Status == store.RunInputRequired:
			resumes = prev.RunID
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, nil, nil, err
		}
	}
	var resumed *store.Run
	if resumes != "" {
		resumed = &store.Run{RunID: resumes}
	}
	prevRunID, err := previousRun(latestReader(ctx, tx, nil, nil), ag, parent.SessionID, resumed)
	if err != nil {
		return nil, nil, nil, err
	}
	ins := &store.RunInsertParams{
		RunID: runID, SessionID: parent.SessionID, AgentID: ag.AgentID, ParentRunID: parent.RunID, RootRunID: parent.RootRunID,
		Depth: parent.Depth + 1, UserID: parent.UserID, Owner: m.opts.InstanceID, StartedAt: now,
		ChildKey: p.childKey(), ToolCallID: p.ToolCallID, IntentionID: parent.IntentionID, ResumesRunID: resumes,
	}
	child, err := tx.RunInsert(ctx, ins)
	if errors.Is(err, store.ErrConflict) && resumes != "" {
		// A concurrent call of the same intention answered that run
		// first: this one starts afresh.
		ins.ResumesRunID = ""
		child, err = tx.RunInsert(ctx, ins)
	}
	if errors.Is(err, store.ErrDuplicate) {
		if child.AgentID != p.AgentID || !m.sameInput(ctx, tx, child, p.Message) {
			e := *ErrChildKeyConflict
			e.Details = map[string]any{"run_id": child.RunID}
			return nil, nil, nil, &e
		}
		return &ChildStarted{Run: child}, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: newMessageID(), SessionID: child.SessionID, RunID: child.RunID,
		AgentID: child.AgentID, ParentRunID: parent.RunID, IntentionID: child.IntentionID, Role: p.Message.Role, Content: p.Message.Content, CreatedAt: now}); err != nil {
		return nil, nil, nil, err
	}
	// The child's span: a child of the caller's span (the tool call that
	// asked for it), else of the parent run's recorded traceparent.
	if !trace.SpanContextFromContext(ctx).IsValid() {
		tp, err := m.parentTraceparent(ctx, tx, parent)
		if err != nil {
			return nil, nil, nil, err
		}
		ctx = tracing.WithTraceparent(ctx, tp)
	}
	sctx, span := tracing.Start(ctx, "agentplane.run", trace.SpanKindInternal, tracing.RunID.String(child.RunID), tracing.SessionID.String(child.SessionID),
		tracing.AgentID.String(child.AgentID), tracing.ParentRunID.String(parent.RunID))
	traceparent := tracing.Traceparent(sctx)
	msg, _ := json.Marshal(p.Message)
	called := map[string]any{"child_run_id": child.RunID, "agent_id": child.AgentID, "depth": child.Depth}
	start := map[string]any{"agent_id": child.AgentID, "input_summary": summarize(p.Message.Content, inputSummaryLen), "depth": child.Depth}
	if p.ToolCallID != "" {
		called["tool_call_id"] = p.ToolCallID
		start["tool_call_id"] = p.ToolCallID
	}
	if p.IdempotencyKey != "" {
		called["idempotency_key"] = p.IdempotencyKey
	}
	ev := func(r *store.Run, typ string, payload any) store.EventParams {
		b, _ := json.Marshal(payload)
		return store.EventParams{SessionID: r.SessionID, RunID: r.RunID, ParentRunID: r.ParentRunID, TS: now, Type: typ, Payload: b}
	}
	evs := []store.EventParams{
		ev(parent, eventlog.TypeAgentCalledChild, called),
		ev(child, eventlog.TypeUserInput, map[string]any{"message": json.RawMessage(msg)}),
		ev(child, eventlog.TypeRunStarted, childStarted(child, msg, traceparent)),
		ev(child, eventlog.TypeAgentInvokeStarted, map[string]any{"agent_id": child.AgentID, "endpoint": ag.Endpoint}),
		ev(child, eventlog.TypeSubAgentCallStart, start),
	}
	launch := func() {
		m.started.Inc(child.AgentID)
		m.launch(&job{run: child, ag: ag, message: p.Message, traceparent: traceparent, span: span, prevRunID: prevRunID})
	}
	return &ChildStarted{Run: child, Created: true}, evs, launch, nil
}

// childStarted is a child's run_started payload.
func childStarted(child *store.Run, msg []byte, traceparent string) map[string]any {
	p := map[string]any{"agent_id": child.AgentID, "message": json.RawMessage(msg), "parent_run_id": child.ParentRunID, "depth": child.Depth, "traceparent": traceparent}
	if child.IntentionID != "" {
		p["intention_id"] = child.IntentionID
	}
	if child.ResumesRunID != "" {
		p["resumes_run_id"] = child.ResumesRunID
	}
	return p
}

// CheckLink refuses a call from parent's agent to agentID unless agentID
// is in its linked_agents, and one that would pass the depth limit.
func (m *Manager) CheckLink(ctx context.Context, q store.Queries, parent *store.Run, agentID string) error {
	caller, err := q.AgentGet(ctx, parent.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		return ErrAgentNotLinked // the caller was deleted: it links nothing
	}
	if err != nil {
		return err
	}
	if !slices.Contains(caller.Links(), agentID) {
		return ErrAgentNotLinked
	}
	if m.opts.MaxCallDepth > 0 && parent.Depth+1 > m.opts.MaxCallDepth {
		e := *ErrMaxDepth
		e.Message = fmt.Sprintf("the child would run at depth %d; AGENTPLANE_MAX_CALL_DEPTH is %d", parent.Depth+1, m.opts.MaxCallDepth)
		return &e
	}
	return nil
}

// sameInput reports whether child was started with msg (an idempotent
// retry) rather than another message under the same key.
func (m *Manager) sameInput(ctx context.Context, q store.Queries, child *store.Run, msg agent.Message) bool {
	evs, err := q.EventsList(ctx, &store.EventsListParams{SessionID: child.SessionID, RunID: child.RunID, Type: eventlog.TypeUserInput, Limit: 1})
	if err != nil || len(evs) == 0 {
		return true // a key's child is never refused for want of its input event
	}
	var in struct {
		Message agent.Message `json:"message"`
	}
	if json.Unmarshal(evs[0].Payload, &in) != nil {
		return true
	}
	return in.Message == msg
}

// parentTraceparent is the traceparent parent's run_started recorded, ""
// if none, so a run tree is one trace even when the child is started
// without the caller's span at hand.
func (m *Manager) parentTraceparent(ctx context.Context, q store.Queries, parent *store.Run) (string, error) {
	evs, err := q.EventsList(ctx, &store.EventsListParams{SessionID: parent.SessionID, RunID: parent.RunID, Type: eventlog.TypeRunStarted, Limit: 1})
	if err != nil || len(evs) == 0 {
		return "", err
	}
	var p struct {
		Traceparent string `json:"traceparent"`
	}
	_ = json.Unmarshal(evs[0].Payload, &p)
	return p.Traceparent, nil
}

// summarize cuts s to at most n bytes of valid UTF-8, marking the cut.
func summarize(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := n - len("…")
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + "…"
}
