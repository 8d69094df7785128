package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

// policyRecord is stored in a call's policy column: the decision, and what
// the call runs under, snapshotted at creation, because the tool's
// definition may change or be deleted while the call waits.
type policyRecord struct {
	Decision  string `json:"decision"`
	Rule      string `json:"rule"`
	Expr      string `json:"expr,omitempty"`
	Endpoint  string `json:"endpoint,omitempty"`
	OnFailure string `json:"on_failure"`
	// Agent is the agent a call_<agent> call runs.
	Agent string `json:"agent,omitempty"`
	// ArgsRedacted: the stored args are redacted; the real ones are held
	// in memory by process ArgsHolder (instance ArgsHeldBy) — redact.go.
	ArgsRedacted bool   `json:"args_redacted,omitempty"`
	ArgsHeldBy   string `json:"args_held_by,omitempty"`
	ArgsHolder   string `json:"args_holder,omitempty"`
}

func recordOf(c *store.ToolCall) policyRecord {
	var r policyRecord
	_ = json.Unmarshal(c.Policy, &r)
	return r
}

// step is one transaction of tool-call work: it moves calls through
// guarded transitions, collects the events recording each change (committed
// with it), keeps the run's state in line and notes what to do once the
// transaction has committed. A step may be run again from scratch if the
// log retries its batch, so it keeps nothing outside itself.
type step struct {
	s   *Service
	ctx context.Context
	q   store.Queries
	at  int64
	run *store.Run // the run the calls belong to, as of this transaction

	evs      []store.EventParams
	toRun    []*store.ToolCall // server calls to claim and execute after commit
	toPost   []claimedCall     // server calls claimed in this step, to send after commit
	launch   []func()          // child runs to drive after commit
	ended    []*store.ToolCall // calls that reached a final state
	runEnded bool              // this step failed the run
}

// commit runs fn as one transaction of runID's session, holding the run's
// append lock so that, if the step fails the run, the agent's stream is
// closed before anything more of it is logged. After the commit it starts
// the server calls the step dispatched.
//
// A step writes only rows of its session — the run, its descendants and
// parent, their tool calls, approvals and transcript — and reads nothing
// else that a step writes (agents' rows, read by a call_<agent> step, are
// written outside the event log: the admin API, heartbeats), so steps of
// different sessions may run at the same time in one group commit
// (eventlog.DoAlongside: on PostgreSQL, eight callers' steps then share
// their round trips instead of taking turns).
func (s *Service) commit(ctx context.Context, sessionID, runID string, fn func(st *step) error) (*step, error) {
	var st *step
	// The tool call's span, or the run's when the step is not the call's
	// own request (an approval, a sweep): a child run's and an
	// execution's parent.
	span := trace.SpanContextFromContext(s.runTrace(ctx, runID))
	do := func() (bool, error) {
		_, err := s.log.DoAlongside(ctx, sessionID, func(ctx context.Context, q store.Queries) ([]store.EventParams, error) {
			if span.IsValid() {
				ctx = trace.ContextWithSpanContext(ctx, span)
			}
			st = &step{s: s, ctx: ctx, q: q, at: s.now()}
			run, err := q.RunLock(ctx, runID)
			if err != nil {
				return nil, err
			}
			st.run = run
			if err := fn(st); err != nil {
				return nil, err
			}
			return st.evs, nil
		})
		return err == nil && st.runEnded, err
	}
	var err error
	if s.opts.Runs != nil {
		err = s.opts.Runs.Guard(runID, do)
	} else {
		_, err = do()
	}
	if err != nil {
		return nil, err
	}
	if st.runEnded {
		s.runFailedMetrics(st.run)
	}
	s.waiters.settled(st.ended)
	for _, c := range st.toRun {
		s.startExecFrom(span, c)
	}
	for _, cc := range st.toPost {
		s.startClaimed(span, cc)
	}
	for _, launch := range st.launch {
		launch()
	}
	return st, nil
}

// event records an event of the run in this transaction.
func (st *step) event(typ string, payload any) {
	b, err := json.Marshal(payload)
	if err != nil {
		b = []byte("{}")
	}
	st.evs = append(st.evs, store.EventParams{
		SessionID: st.run.SessionID, RunID: st.run.RunID, ParentRunID: st.run.ParentRunID,
		TS: st.at, Type: typ, Payload: b,
	})
}

// move is a guarded transition of c; ErrConflict (with the current row)
// when c is no longer in one of from.
func (st *step) move(c *store.ToolCall, p store.ToolCallTransitionParams) (*store.ToolCall, error) {
	p.ID, p.At = c.ToolCallID, st.at
	return st.q.ToolCallTransition(st.ctx, &p)
}

// finish moves c from one of from to a final state, records tool_result,
// and follows the tool's on_failure when the call failed. ifDueBy > 0 is
// the sweeper's guard (the deadline must still be due).
func (st *step) finish(c *store.ToolCall, from []string, status string, result, errJSON json.RawMessage, ifDueBy int64) (*store.ToolCall, error) {
	prev := c
	c, err := st.move(c, store.ToolCallTransitionParams{From: from, Status: status, Result: result, Error: errJSON, IfDueBy: ifDueBy})
	if err != nil {
		return c, err
	}
	st.ended = append(st.ended, c)
	payload := map[string]any{
		"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "state": c.Status, "status": apiStatus(c.Status),
		"duration_ms": st.at - c.CreatedAt,
	}
	if prev.Status == store.ToolCallRunning || prev.Status == store.ToolCallWaitingClient {
		payload["exec_ms"] = st.at - prev.UpdatedAt
	}
	v := View(c)
	if v.Error != nil {
		payload["error"] = v.Error
	} else {
		payload["result"] = v.Result
	}
	st.event(eventlog.TypeToolResult, payload)
	if status == store.ToolCallSucceeded || status == store.ToolCallCancelled {
		return c, st.syncRun(c, nil)
	}
	if recordOf(c).OnFailure == "return_to_agent" {
		return c, st.syncRun(c, nil)
	}
	return c, st.failRun(c, v.Error)
}

// dispatch moves c (POLICY_CHECKED or WAITING_APPROVAL) to DISPATCHED with
// a fresh tool timeout. A server call whose arguments this process has is
// claimed in the same transaction (claim) and sent after the commit;
// otherwise it is claimed and sent after the commit by whoever holds them. A
// client call is sent to the session's clients, or fails with
// client_offline at once when none is connected.
func (st *step) dispatch(c *store.ToolCall) (*store.ToolCall, error) {
	deadline := st.at + c.TimeoutMS
	if c.Kind == store.ToolKindServer || c.Kind == store.ToolKindMCP {
		if rec := recordOf(c); st.s.argsFor(c, rec) != nil {
			return st.dispatchClaimed(c, rec, deadline)
		}
	}
	c, err := st.move(c, store.ToolCallTransitionParams{From: []string{c.Status}, Status: store.ToolCallDispatched, DeadlineAt: &deadline})
	if err != nil {
		return c, err
	}
	switch c.Kind {
	case store.ToolKindServer, store.ToolKindMCP:
		st.toRun = append(st.toRun, c) // claimed by the holder of its arguments
		return c, st.syncRun(c, nil)
	case store.ToolKindAgent:
		return st.dispatchAgent(c)
	}
	online := false
	if connected := st.s.opts.ClientConnected; connected != nil {
		if online, err = connected(st.ctx, st.q, c.SessionID); err != nil {
			return c, fmt.Errorf("client presence of session %s: %w", c.SessionID, err)
		}
	}
	if !online {
		return st.finish(c, []string{store.ToolCallDispatched}, store.ToolCallFailed, nil,
			errorJSON("client_offline", "no client of the session is connected to run "+c.ToolName, nil), 0)
	}
	if c, err = st.move(c, store.ToolCallTransitionParams{From: []string{store.ToolCallDispatched}, Status: store.ToolCallWaitingClient}); err != nil {
		return c, err
	}
	st.event(eventlog.TypeToolDispatched, map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "kind": c.Kind, "attempt": 1, "deadline_at": c.DeadlineAt})
	st.event(eventlog.TypeToolRequest, toolRequest(c))
	return c, st.syncRun(c, nil)
}

// toolRequest is the payload of the client's tool_request.
func toolRequest(c *store.ToolCall) map[string]any {
	return map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "args": c.Args, "deadline_ts": c.DeadlineAt}
}

// syncRun keeps the run's state in line with its calls: paused waiting for
// an approval while any call waits for one, paused waiting for a tool while
// a client tool runs, running otherwise. A change is recorded as a state
// event the client sees; detail names the call that caused it.
func (st *step) syncRun(c *store.ToolCall, extra map[string]any) error {
	if store.RunIsTerminal(st.run.Status) {
		return nil
	}
	if st.run.Status == store.RunRunning && !pauses(c) {
		// A run is RUNNING only while none of its calls pauses it (every
		// change of a call's state comes here, under the run's row lock),
		// and c does not: nothing can change, no need to list the calls.
		return nil
	}
	calls, err := st.q.ToolCallListActiveByRun(st.ctx, st.run.RunID)
	if err != nil {
		return err
	}
	want := store.RunRunning
	for _, a := range calls {
		if a.Status == store.ToolCallWaitingApproval {
			want = store.RunPausedWaitingApproval
			break
		}
		if pauses(a) {
			want = store.RunPausedWaitingTool
		}
	}
	if want == st.run.Status {
		return nil
	}
	r, err := st.q.RunTransition(st.ctx, &store.RunTransitionParams{RunID: st.run.RunID, From: []string{st.run.Status}, Status: want, At: st.at})
	if err != nil {
		return fmt.Errorf("run %s to %s: %w", st.run.RunID, want, err)
	}
	st.run = r
	detail := map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "outcome": c.Status}
	if c.ApprovalID != "" {
		detail["approval_id"] = c.ApprovalID
	}
	for k, v := range extra {
		detail[k] = v
	}
	st.event(eventlog.TypeState, map[string]any{"state": want, "detail": detail, "source": eventlog.StateSourcePlatform})
	return nil
}

// pauses reports whether call c, in its state, pauses its run: it waits
// for an approval, or for the client that runs it.
func pauses(c *store.ToolCall) bool {
	return c.Status == store.ToolCallWaitingApproval ||
		(c.Kind == store.ToolKindClient && (c.Status == store.ToolCallWaitingClient || c.Status == store.ToolCallDispatched))
}

// failRun fails the run because call c failed (on_failure: fail_run). The
// run's error carries the call's code so the client sees why (DESIGN §8).
func (st *step) failRun(c *store.ToolCall, e *CallError) error {
	if store.RunIsTerminal(st.run.Status) {
		return nil
	}
	msg := fmt.Sprintf("tool %s failed (%s): %s", c.ToolName, e.Code, e.Message)
	errJSON, _ := json.Marshal(map[string]string{"code": e.Code, "message": msg, "tool_call_id": c.ToolCallID, "tool_name": c.ToolName})
	if runs := st.s.opts.Runs; runs != nil {
		// The run manager's end: the run's descendants, its calls, and the
		// call of its own caller when it is a child, in this transaction.
		evs, ended, err := runs.EndTx(st.ctx, st.q, st.run, st.at, run.End{Status: store.RunFailed, Error: errJSON,
			Reason: "the run failed: " + msg, Invoke: map[string]any{"ended_by": "tool_call"}})
		if err != nil || len(ended) == 0 {
			return err
		}
		st.run = ended[len(ended)-1]
		st.runEnded = true
		st.evs = append(st.evs, evs...)
		return nil
	}
	// Without a run manager (tests of this package alone): the run's own
	// end and its calls.
	r, err := st.q.RunTransition(st.ctx, &store.RunTransitionParams{RunID: st.run.RunID, From: store.RunActiveStatuses, Status: store.RunFailed, At: st.at, Error: errJSON})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	st.run = r
	st.runEnded = true
	if err := st.cascade("the run failed: " + msg); err != nil {
		return err
	}
	invokeDone, _ := json.Marshal(map[string]any{"ok": false, "error": json.RawMessage(errJSON), "ended_by": "tool_call"})
	st.evs = append(st.evs,
		store.EventParams{SessionID: r.SessionID, RunID: r.RunID, ParentRunID: r.ParentRunID, TS: st.at, Type: eventlog.TypeAgentInvokeDone, Payload: invokeDone},
		store.EventParams{SessionID: r.SessionID, RunID: r.RunID, ParentRunID: r.ParentRunID, TS: st.at, Type: eventlog.TypeRunFailed, Payload: errJSON})
	return nil
}

// cascade ends every call of the run still in flight, and cancels their
// pending approvals, because the run ended (DESIGN §2.4); reason says how
// it ended. A call that reached a final state meanwhile (another replica)
// is left as it is.
//
// A server call that is RUNNING was POSTed to its tool, which may have done
// its work whatever becomes of the request: it ends FAILED outcome_unknown,
// never a cancel that would tell an audit nothing happened (issue 8). Every
// other call ends CANCELLED: one DISPATCHED was never sent (the claim to
// RUNNING precedes the POST and now finds the call ended), and a client
// tool's client learns of the run's end from the same event stream that
// asked it.
func (st *step) cascade(reason string) error {
	calls, err := st.q.ToolCallListActiveByRun(st.ctx, st.run.RunID)
	if err != nil {
		return err
	}
	for _, c := range calls {
		if c.Status == store.ToolCallWaitingApproval && c.ApprovalID != "" {
			// The approval first: every path locks an approval before its call.
			a, err := st.q.ApprovalDecide(st.ctx, &store.ApprovalDecideParams{ID: c.ApprovalID, Status: store.ApprovalCancelled, DecidedBy: "platform", Reason: reason, At: st.at})
			if err == nil {
				st.event(eventlog.TypeApprovalDecision, decisionPayload(a, st.at))
			} else if !errors.Is(err, store.ErrConflict) {
				return err
			}
		}
		prev, c, err := st.endOnRunEnd(c, reason)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		st.ended = append(st.ended, c)
		payload := map[string]any{
			"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "state": c.Status, "status": StatusFailed,
			"error": View(c).Error, "duration_ms": st.at - c.CreatedAt,
		}
		if prev.Status == store.ToolCallRunning || prev.Status == store.ToolCallWaitingClient {
			payload["exec_ms"] = st.at - prev.UpdatedAt
		}
		st.event(eventlog.TypeToolResult, payload)
	}
	return nil
}

// endOnRunEnd moves c, in flight when its run ended, to the final state
// cascade describes. The transition is guarded on the state c was listed
// in, which decides the outcome; should the call have moved on meanwhile,
// the next state is judged again (ErrConflict once it is final).
func (st *step) endOnRunEnd(c *store.ToolCall, reason string) (prev, ended *store.ToolCall, err error) {
	for {
		to, errJSON := store.ToolCallCancelled, errorJSON("cancelled", reason, nil)
		if (c.Kind == store.ToolKindServer || c.Kind == store.ToolKindMCP) && c.Status == store.ToolCallRunning {
			to, errJSON = store.ToolCallFailed, errorJSON("outcome_unknown",
				reason+" while the tool was running: it may have run, but its result was not received", nil)
		}
		cur, err := st.move(c, store.ToolCallTransitionParams{From: []string{c.Status}, Status: to, Error: errJSON})
		if errors.Is(err, store.ErrConflict) && cur != nil && !store.ToolCallTerminal(cur.Status) && cur.Status != c.Status {
			c = cur
			continue
		}
		return c, cur, err
	}
}

// decisionPayload is the approval_decision event of a decided approval.
func decisionPayload(a *store.Approval, at int64) map[string]any {
	return map[string]any{
		"approval_id": a.ApprovalID, "tool_call_id": a.ToolCallID, "tool_name": a.ToolName,
		"decision": strings.ToLower(a.Status), "decided_by": a.DecidedBy, "reason": a.Reason,
		"decided_at": a.DecidedAt, "waited_ms": at - a.CreatedAt,
	}
}

// OnRunEnd is the run manager's hook (run.Options.OnEnd): in the
// transaction that ends a run, end what the run still waits for. reason
// says how the run ended ("the run was cancelled by alice").
func (s *Service) OnRunEnd(ctx context.Context, q store.Queries, run *store.Run, at int64, reason string) ([]store.EventParams, error) {
	st := &step{s: s, ctx: ctx, q: q, at: at, run: run}
	if reason == "" {
		reason = "the run ended"
	}
	if err := st.cascade(reason); err != nil {
		return nil, err
	}
	return st.evs, nil
}
