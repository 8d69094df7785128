package toolsvc

// The call_<agent_id> tools (issue 9, DESIGN §11): a tool call whose
// execution is a child run of the agent. The call goes through the same
// state machine as any other (policy, CEL rules, approval, idempotency,
// events); its dispatch starts the child in the same transaction as the
// claim to run it, and the child's end settles it in the child's terminal
// transaction (run.Options.OnChildEnd), so nothing waits in memory.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// agentTools caches compiled call_<agent> tools by name, each with the
// versions of the agent and of the registry override it was built from
// (compiling costs about a millisecond: once per version, never per call).
type agentTools struct {
	mu sync.Mutex
	m  map[string]agentToolEntry
}

type agentToolEntry struct {
	agentAt, rowAt int64
	t              *tool.Tool
}

// isAgentTool reports whether name is a call_<agent_id> tool.
func isAgentTool(name string) bool { return strings.HasPrefix(name, tool.AgentToolPrefix) }

// lookup returns the tool name names, for a call: a registered tool, or
// call_<agent_id> for a registered agent (with the registry's override of
// that name, if any).
func (s *Service) lookup(ctx context.Context, name string) (*tool.Tool, error) {
	if !isAgentTool(name) {
		t, _, err := s.registry.get(ctx, name)
		return t, err
	}
	return s.agentTool(ctx, name)
}

// agentTool builds call_<agent_id>: parameters {message}, policy allow, no
// timeout, on_failure return_to_agent, the agent's name and description —
// each but the parameters overridable by PUT /v1/tools/call_<agent_id>.
func (s *Service) agentTool(ctx context.Context, name string) (*tool.Tool, error) {
	id := strings.TrimPrefix(name, tool.AgentToolPrefix)
	ag, err := s.agent(ctx, id)
	if errors.Is(err, store.ErrNotFound) && strings.Contains(id, "__") {
		// The OpenAI spelling of a dotted agent id, as GET /v1/tools lists
		// it (tool.FunctionName): both spellings invoke the agent.
		id = strings.ReplaceAll(id, "__", ".")
		name = tool.AgentToolPrefix + id
		ag, err = s.agent(ctx, id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrToolNotFound
	}
	if err != nil {
		return nil, err
	}
	row, err := s.registry.rows.Get(ctx, name, s.st.ToolGet)
	if errors.Is(err, store.ErrNotFound) {
		row, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rowAt int64 = -1
	if row != nil {
		rowAt = row.UpdatedAt
	}
	s.agentTools.mu.Lock()
	e, ok := s.agentTools.m[name]
	s.agentTools.mu.Unlock()
	if ok && e.agentAt == ag.UpdatedAt && e.rowAt == rowAt {
		return e.t, nil
	}
	d := tool.Definition{Name: name, Kind: tool.KindAgent}
	if row != nil {
		if err := json.Unmarshal(row.Definition, &d); err != nil {
			return nil, fmt.Errorf("stored definition of tool %s: %w", name, err)
		}
	}
	if d.Description == "" {
		d.Description = describeAgent(ag)
	}
	t, err := tool.Compile(d)
	if err != nil {
		if tool.CheckAgentID(ag.AgentID) != nil {
			// An agent registered before such ids were refused: it has no
			// tool form (the direct form still reaches it).
			return nil, ErrToolNotFound
		}
		return nil, fmt.Errorf("tool %s: %w", name, err)
	}
	s.agentTools.mu.Lock()
	if s.agentTools.m == nil {
		s.agentTools.m = map[string]agentToolEntry{}
	}
	s.agentTools.m[name] = agentToolEntry{agentAt: ag.UpdatedAt, rowAt: rowAt, t: t}
	s.agentTools.mu.Unlock()
	return t, nil
}

// agent reads an agent's row through the run manager, which keeps rows
// briefly; without one, from the store.
func (s *Service) agent(ctx context.Context, agentID string) (*store.Agent, error) {
	if s.opts.Runs != nil {
		return s.opts.Runs.Agent(ctx, agentID)
	}
	return s.st.AgentGet(ctx, agentID)
}

// describeAgent is a call_<agent> tool's description: the agent's name
// and what it does.
func describeAgent(ag *store.Agent) string {
	d := "Ask the agent " + ag.Name
	if ag.Description != "" {
		d += ": " + ag.Description
	}
	return d
}

// agentToolsFor returns the call_<agent> tools of agentID's linked agents
// (those registered), in the order of its links.
func (s *Service) agentToolsFor(ctx context.Context, agentID string) ([]*tool.Tool, error) {
	caller, err := s.agent(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*tool.Tool
	for _, id := range caller.Links() {
		t, err := s.agentTool(ctx, tool.AgentToolPrefix+id)
		if errors.Is(err, ErrToolNotFound) {
			continue // linked but not registered (yet)
		}
		if err != nil {
			s.opts.Logger.Warn("skipping an agent tool that does not compile", "tool_name", tool.AgentToolPrefix+id, "err", err)
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// dispatchAgent runs c, a DISPATCHED call_<agent> call: the claim to run
// (DISPATCHED → RUNNING, guarded, so whoever races it runs it once) and
// the child run start in this same transaction, so there is never a
// running call without its child nor a child without its claim. The
// child's agent is driven once the transaction commits. A child the
// platform refuses to start (the link was removed, the depth limit, the
// agent was deleted) fails the call sub_agent_failed.
func (st *step) dispatchAgent(c *store.ToolCall) (*store.ToolCall, error) {
	p := store.ToolCallTransitionParams{From: []string{store.ToolCallDispatched}, Status: store.ToolCallRunning, IncAttempts: true}
	if c.TimeoutMS == 0 {
		none := int64(0)
		p.DeadlineAt = &none // no deadline while the child runs
	}
	claimed, err := st.move(c, p)
	if err != nil {
		return claimed, err
	}
	rec := recordOf(claimed)
	runs := st.s.opts.Runs
	if runs == nil {
		return st.finish(claimed, []string{store.ToolCallRunning}, store.ToolCallFailed, nil,
			errorJSON("sub_agent_failed", "agent calls are not enabled in this process", nil), 0)
	}
	var args struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(claimed.Args, &args)
	started, evs, launch, err := runs.BeginChild(st.ctx, st.q, st.run, run.ChildParams{
		CallerAgentID: claimed.AgentID, ParentRunID: claimed.RunID, AgentID: rec.Agent,
		Message: agent.Message{Role: "user", Content: args.Message}, ToolCallID: claimed.ToolCallID,
	})
	var refused *respond.Error
	if errors.As(err, &refused) {
		detail, _ := json.Marshal(map[string]string{"code": refused.Code, "message": refused.Message})
		return st.finish(claimed, []string{store.ToolCallRunning}, store.ToolCallFailed, nil,
			errorJSON("sub_agent_failed", "agent "+rec.Agent+" could not be started: "+refused.Message, detail), 0)
	}
	if err != nil {
		return claimed, err
	}
	st.event(eventlog.TypeToolDispatched, map[string]any{"tool_call_id": claimed.ToolCallID, "tool_name": claimed.ToolName, "kind": claimed.Kind,
		"attempt": claimed.Attempts, "agent_id": rec.Agent, "child_run_id": started.Run.RunID, "deadline_at": claimed.DeadlineAt})
	st.evs = append(st.evs, evs...)
	if launch != nil {
		st.launch = append(st.launch, launch)
	}
	return claimed, st.syncRun(claimed, nil)
}

// OnChildEnd is the run manager's hook (run.Options.OnChildEnd): the child
// run of a call_<agent> call ended, in this transaction, so the call ends
// with it — SUCCEEDED with {output, run_id, usage}, or FAILED
// sub_agent_failed with the child's error as detail, handed back to the
// agent (or failing its run) per the call's on_failure.
func (s *Service) OnChildEnd(ctx context.Context, q store.Queries, child *store.Run, at int64, end run.End) ([]store.EventParams, error) {
	c, err := q.ToolCallGet(ctx, child.ToolCallID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if store.ToolCallTerminal(c.Status) {
		return nil, nil // timed out or cancelled before the child ended
	}
	parent, err := q.RunLock(ctx, c.RunID)
	if err != nil {
		return nil, err
	}
	if store.RunIsTerminal(parent.Status) {
		return nil, nil // the parent's end cascades the call
	}
	st := &step{s: s, ctx: ctx, q: q, at: at, run: parent}
	var status string
	var result, errJSON json.RawMessage
	switch end.Status {
	case store.RunDone:
		usage := end.Usage
		if len(usage) == 0 {
			usage = json.RawMessage("{}")
		}
		status = store.ToolCallSucceeded
		result, _ = json.Marshal(map[string]any{"output": end.Output, "run_id": child.RunID, "usage": usage})
	case store.RunInputRequired:
		// The child asked back (DESIGN §12): not a failure. The caller
		// decides whether to ask the user; calling the agent again in the
		// same intention answers the question.
		status = store.ToolCallSucceeded
		r := map[string]any{"status": "input_required", "question": end.Question, "run_id": child.RunID}
		if len(end.Detail) > 0 {
			r["detail"] = end.Detail
		}
		result, _ = json.Marshal(r)
	default:
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(end.Error, &e)
		how := "failed"
		if end.Status == store.RunCancelled {
			how = "was cancelled"
		}
		detail, _ := json.Marshal(map[string]any{"run_id": child.RunID, "status": end.Status, "code": e.Code, "message": e.Message})
		status = store.ToolCallFailed
		errJSON = errorJSON("sub_agent_failed", fmt.Sprintf("agent %s's run %s %s (%s): %s", child.AgentID, child.RunID, how, e.Code, e.Message), detail)
	}
	if _, err := st.finish(c, []string{store.ToolCallRunning}, status, result, errJSON, 0); err != nil && !errors.Is(err, store.ErrConflict) {
		return nil, err
	}
	return st.evs, nil
}

// endChild ends the child run of c, a call_<agent> call that just ended
// without its child (its timeout passed): the child is cancelled with
// code, in this transaction.
func (st *step) endChild(c *store.ToolCall, code, message string) error {
	runs := st.s.opts.Runs
	if runs == nil {
		return nil
	}
	kids, err := st.q.RunListChildren(st.ctx, c.RunID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(kids, func(r *store.Run) bool { return r.ToolCallID == c.ToolCallID })
	if i < 0 || store.RunIsTerminal(kids[i].Status) {
		return nil
	}
	errJSON, _ := json.Marshal(map[string]string{"code": code, "message": message})
	state, _ := json.Marshal(map[string]any{"state": store.RunCancelled, "detail": map[string]string{"reason": message, "by": "platform"}, "source": eventlog.StateSourcePlatform})
	evs, _, err := runs.EndTx(st.ctx, st.q, kids[i], st.at, run.End{Status: store.RunCancelled, Error: errJSON, Reason: message, CancelState: state})
	if err != nil {
		return err
	}
	st.evs = append(st.evs, evs...)
	return nil
}
