package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// End says how a run ends. Every way a run ends — its agent finishing or
// failing, a cancel, a tool call failing it, the orphan sweep — goes through
// EndTx with one.
type End struct {
	// Status is DONE, FAILED, CANCELLED or INPUT_REQUIRED.
	Status string
	// Error is the run's {code, message, …}; nil for DONE.
	Error json.RawMessage
	// Usage is what the agent reported with done (DONE).
	Usage json.RawMessage
	// Output is the agent's whole answer (DONE), appended to the transcript
	// and, for a child, handed to its caller.
	Output string
	// Reason says in words how the run ended, for what it ends with it
	// ("the run was cancelled by alice").
	Reason string
	// Invoke, when set, is recorded as agent_invoke_done (ok and error are
	// added): the agent's request ended with the run.
	Invoke map[string]any
	// CancelledBy names who cancelled (CANCELLED by a cancel); the run's
	// descendants are then cancelled "by" the same actor. Any other end
	// ends them with code parent_ended.
	CancelledBy string
	// CancelState is the state payload of run_cancelled (CANCELLED).
	CancelState json.RawMessage
	// Question and Detail are what the agent asked (INPUT_REQUIRED): the
	// question becomes the agent's transcript row and, for a child, what
	// its caller gets.
	Question string
	Detail   json.RawMessage

	// remote is the remote A2A task the run recorded last, kept in memory
	// once the end commits (remoteRefs).
	remote *remoteRef
	// quiet: the run is expected to have no child, no tool call and no
	// LLM call (a remote A2A agent's), so its end is sent without reading
	// that first where the store can (store.RunQuietEnder).
	quiet bool
}

// code is the error code of e ("" for DONE).
func (e *End) code() string {
	var c struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(e.Error, &c)
	return c.Code
}

// EndTx ends run inside tx, the caller's transaction of the run's session:
// the guarded transition to end.Status and, in the same transaction, what
// the tree and the trace need (DESIGN §2.4, §11):
//
//   - the run's still-active descendants end first, deepest first, each
//     CANCELLED (code "cancelled" by the same actor when this is a cancel,
//     "parent_ended" otherwise) with its own tool calls and approvals;
//   - the run's own tool calls and approvals end (Options.OnEnd);
//   - its terminal events, and for a child the sub_agent_complete or
//     sub_agent_error its session's clients see instead;
//   - for a child started by a call_<agent> tool call, that call is settled
//     (Options.OnChildEnd), so the caller's wait needs nothing in memory.
//
// It returns the events to append, in that order, and the ended runs (the
// run last); none when the run had already ended. Agent requests of the
// ended runs that this process drives are closed once the events commit
// (the log's commit hook); other processes hear it through the
// notification.
func (m *Manager) EndTx(ctx context.Context, tx store.Queries, run *store.Run, at int64, end End) ([]store.EventParams, []*store.Run, error) {
	if run.ToolCallID != "" && run.ParentRunID != "" {
		// Rows are locked ancestor first on every path (a parent's end locks
		// its descendants after itself), and this end settles a call of the
		// parent, so lock the parent before the run.
		if _, err := tx.RunLock(ctx, run.ParentRunID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	}
	if ended, ok, err := m.endQuiet(ctx, tx, run, at, &end); ok || err != nil {
		if err != nil {
			return nil, nil, err
		}
		own, err := m.endEvents(ctx, tx, ended, at, &end, true, &store.RunOutlook{})
		if err != nil {
			return nil, nil, err
		}
		return own, []*store.Run{ended}, nil
	}
	// With the transition, what else the end has to visit, in one read
	// (sent with it on PostgreSQL): most runs have no child, no tool call
	// left open and no LLM call, and skip those reads.
	ended, look, err := tx.RunEndTransition(ctx, &store.RunTransitionParams{RunID: run.RunID, From: store.RunActiveStatuses, Status: end.Status, At: at, Error: end.Error, Usage: end.Usage,
		Question: end.Question, QuestionDetail: end.Detail}, run.SessionID)
	if errors.Is(err, store.ErrConflict) {
		return nil, nil, nil // ended meanwhile; nothing to record
	}
	if err != nil {
		return nil, nil, err
	}
	var evs []store.EventParams
	var all []*store.Run
	if look.Children {
		if evs, all, err = m.endDescendants(ctx, tx, ended, at, &end); err != nil {
			return nil, nil, err
		}
	}
	own, err := m.endEvents(ctx, tx, ended, at, &end, true, look)
	if err != nil {
		return nil, nil, err
	}
	return append(evs, own...), append(all, ended), nil
}

// endQuiet ends a run expected to be quiet (end.quiet) without reading
// anything first, where the store can and the log lets it assume
// (eventlog.Assume): the transaction fails if the run was not active or
// not quiet, and runs again reading first. It returns the run as ended
// (ok), built from run, which the end does not read back.
func (m *Manager) endQuiet(ctx context.Context, tx store.Queries, run *store.Run, at int64, end *End) (*store.Run, bool, error) {
	// A call_<agent> child settles its caller's tool call (OnChildEnd),
	// which reads: not for this path.
	if !end.quiet || run.ToolCallID != "" {
		return nil, false, nil
	}
	q, ok := tx.(store.RunQuietEnder)
	if !ok || !eventlog.Assume(ctx) {
		return nil, false, nil
	}
	p := &store.RunTransitionParams{RunID: run.RunID, From: store.RunActiveStatuses, Status: end.Status, At: at, Error: end.Error, Usage: end.Usage,
		Question: end.Question, QuestionDetail: end.Detail}
	if err := q.RunEndQuiet(ctx, p, run.SessionID); err != nil {
		return nil, false, err
	}
	// What the UPDATE leaves in the row (COALESCE keeps what it had).
	ended := *run
	ended.Status, ended.EndedAt = end.Status, at
	if len(end.Error) > 0 {
		ended.Error = end.Error
	}
	if len(end.Usage) > 0 {
		ended.Usage = end.Usage
	}
	if end.Question != "" {
		ended.Question = end.Question
	}
	if len(end.Detail) > 0 {
		ended.QuestionDetail = end.Detail
	}
	return &ended, true, nil
}

// endDescendants ends run's still-active descendants, deepest first.
func (m *Manager) endDescendants(ctx context.Context, tx store.Queries, run *store.Run, at int64, why *End) ([]store.EventParams, []*store.Run, error) {
	tree, err := tx.RunListTree(ctx, run.RootRunID)
	if err != nil {
		return nil, nil, err
	}
	desc := descendants(tree, run.RunID)
	var live []*store.Run
	for _, d := range desc { // shallowest first: lock order
		if store.RunIsTerminal(d.Status) {
			continue
		}
		cur, err := tx.RunLock(ctx, d.RunID)
		if err != nil {
			return nil, nil, err
		}
		if !store.RunIsTerminal(cur.Status) {
			live = append(live, cur)
		}
	}
	if len(live) == 0 {
		return nil, nil, nil
	}
	code, by := "parent_ended", ""
	msg := fmt.Sprintf("run %s, which started this one, ended (%s)", run.RunID, why.Reason)
	if why.CancelledBy != "" {
		code, by = "cancelled", why.CancelledBy
		msg = "cancelled by " + by + " with run " + run.RunID
	}
	errJSON, _ := json.Marshal(map[string]string{"code": code, "message": msg})
	var evs []store.EventParams
	var ended []*store.Run
	for _, d := range slices.Backward(live) { // deepest first
		detail := map[string]string{"reason": msg, "by": by}
		if by == "" {
			detail["by"] = "platform"
		}
		state, _ := json.Marshal(map[string]any{"state": store.RunCancelled, "detail": detail, "source": eventlog.StateSourcePlatform})
		e := &End{Status: store.RunCancelled, Error: errJSON, Reason: msg, CancelState: state, CancelledBy: by}
		r, err := tx.RunTransition(ctx, &store.RunTransitionParams{RunID: d.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: at, Error: errJSON})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		// The call_<agent> call whose execution d is belongs to d's parent,
		// which is ending here too: its own cascade settles that call.
		own, err := m.endEvents(ctx, tx, r, at, e, false, nil)
		if err != nil {
			return nil, nil, err
		}
		evs = append(evs, own...)
		ended = append(ended, r)
	}
	return evs, ended, nil
}

// descendants returns the runs below runID in tree, shallowest first.
func descendants(tree []*store.Run, runID string) []*store.Run {
	children := map[string][]*store.Run{}
	for _, r := range tree {
		if r.ParentRunID != "" {
			children[r.ParentRunID] = append(children[r.ParentRunID], r)
		}
	}
	var out []*store.Run
	queue := []string{runID}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, c := range children[id] {
			out = append(out, c)
			queue = append(queue, c.RunID)
		}
	}
	return out
}

// endEvents records the end of run (already transitioned): its tool
// calls' cascade, the transcript, the terminal events and, for a child,
// the echo and (when settleCall) the call_<agent> call it executed. look,
// when known, skips the cascade of a run with no tool call open and the
// cost of a run with no LLM call.
func (m *Manager) endEvents(ctx context.Context, tx store.Queries, run *store.Run, at int64, end *End, settleCall bool, look *store.RunOutlook) ([]store.EventParams, error) {
	reason := end.Reason
	if reason == "" {
		reason = "the run ended"
	}
	var evs []store.EventParams
	if look == nil || look.OpenToolCalls {
		var err error
		if evs, err = m.onEnd(ctx, tx, run, at, reason); err != nil {
			return nil, err
		}
	}
	ev := func(typ string, payload any) {
		b, ok := payload.(json.RawMessage)
		if !ok {
			b, _ = json.Marshal(payload)
		}
		evs = append(evs, store.EventParams{SessionID: run.SessionID, RunID: run.RunID, ParentRunID: run.ParentRunID, TS: at, Type: typ, Payload: b})
	}
	duration := at - run.StartedAt
	if end.Invoke != nil {
		ok := end.Status == store.RunDone || end.Status == store.RunInputRequired
		info := map[string]any{"ok": ok}
		for k, v := range end.Invoke {
			info[k] = v
		}
		if end.Status == store.RunInputRequired {
			info["input_required"] = true
		}
		if !ok {
			info["error"] = json.RawMessage(end.Error)
		}
		ev(eventlog.TypeAgentInvokeDone, info)
	}
	child := run.ParentRunID != ""
	switch end.Status {
	case store.RunDone:
		usage := end.Usage
		if len(usage) == 0 {
			usage = json.RawMessage("{}")
		}
		if end.Output != "" {
			if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: newMessageID(), SessionID: run.SessionID, RunID: run.RunID,
				AgentID: run.AgentID, ParentRunID: run.ParentRunID, IntentionID: run.IntentionID, Role: "assistant", Content: end.Output, CreatedAt: at}); err != nil {
				return nil, err
			}
		}
		var cost float64
		var calls int
		if look == nil || look.LLMCalls {
			var err error
			if cost, calls, err = runCost(ctx, tx, run); err != nil {
				return nil, err
			}
		}
		if child {
			ev(eventlog.TypeSubAgentComplete, map[string]any{"agent_id": run.AgentID, "output": end.Output, "usage": usage, "duration_ms": duration})
		}
		ev(eventlog.TypeRunDone, map[string]any{"usage": usage, "total_cost": cost, "llm_calls": calls})
	case store.RunInputRequired:
		// The question is the agent's turn in the transcript, so the run
		// that resumes this one finds it in its messages[].
		if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: newMessageID(), SessionID: run.SessionID, RunID: run.RunID,
			AgentID: run.AgentID, ParentRunID: run.ParentRunID, IntentionID: run.IntentionID, Role: "assistant", Content: end.Question, CreatedAt: at}); err != nil {
			return nil, err
		}
		asked := map[string]any{"question": end.Question}
		if len(end.Detail) > 0 {
			asked["detail"] = end.Detail
		}
		if child {
			complete := map[string]any{"agent_id": run.AgentID, "status": "input_required", "output": "", "usage": json.RawMessage("{}"), "duration_ms": duration}
			for k, v := range asked {
				complete[k] = v
			}
			ev(eventlog.TypeSubAgentComplete, complete)
		}
		ev(eventlog.TypeInputRequired, asked)
	case store.RunFailed, store.RunCancelled:
		if child {
			var e struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(end.Error, &e)
			ev(eventlog.TypeSubAgentError, map[string]any{"agent_id": run.AgentID, "code": e.Code, "message": e.Message, "duration_ms": duration})
		}
		if end.Status == store.RunFailed {
			ev(eventlog.TypeRunFailed, end.Error)
		} else {
			ev(eventlog.TypeRunCancelled, end.CancelState)
		}
	default:
		return nil, fmt.Errorf("end run %s: %q is not a final status", run.RunID, end.Status)
	}
	if settleCall && run.ToolCallID != "" && m.opts.OnChildEnd != nil {
		more, err := m.opts.OnChildEnd(ctx, tx, run, at, *end)
		if err != nil {
			return nil, err
		}
		evs = append(evs, more...)
	}
	return evs, nil
}

// countEnded records ended runs in the metrics, and as seen (seen.go),
// once their end committed.
func (m *Manager) countEnded(runs []*store.Run) {
	m.seen.ended(runs)
	for _, r := range runs {
		var e End
		e.Error = r.Error
		m.ended(r, r.Status, e.code(), r.EndedAt)
	}
}

// committed is the log's commit hook: a run of this process whose
// terminal event just committed — ended by a parent's end, a tool call or a
// cancel in some other transaction — has its agent request closed, so
// nothing more of its stream is recorded (it would be dropped at commit
// anyway: deltas are appended IfRunActive). It runs on the writer
// goroutine and must not block: it takes no run's append lock.
func (m *Manager) committed(evs []store.Event) {
	for i := range evs {
		if !eventlog.IsRunEnd(evs[i].Type) {
			continue
		}
		m.mu.Lock()
		a := m.active[evs[i].RunID]
		m.mu.Unlock()
		if a != nil {
			a.cancel(errEndedElsewhere) // no effect once the run's loop is past its agent request
		}
	}
}
