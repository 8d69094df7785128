package toolsvc

import (
	"context"
	"errors"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// Cancel ends a call that has not finished: CANCELLED, with its pending
// approval cancelled too, and the run resumes (a cancelled call does not
// fail its run; the agent that cancelled it knows). A call that has
// already finished is returned as it is, so a repeated cancel is
// harmless. An MCP request in flight for it is cancelled on its server.
// The agent's POST /v1/tool_calls/{id}:cancel and the /mcp server's
// notifications/cancelled both come here.
func (s *Service) Cancel(ctx context.Context, who Caller, id, reason string) (*CallView, error) {
	if len(reason) > MaxReasonLen {
		return nil, badRequest("invalid_request", "reason is too long")
	}
	if reason == "" {
		reason = "cancelled by the caller"
	}
	c, err := s.callFor(ctx, who, id)
	if err != nil {
		return nil, err
	}
	if store.ToolCallTerminal(c.Status) {
		return View(c), nil
	}
	var done *store.ToolCall
	_, err = s.commit(ctx, c.SessionID, c.RunID, func(st *step) error {
		done = nil
		cur, err := st.q.ToolCallGet(st.ctx, c.ToolCallID)
		if err != nil {
			return err
		}
		if store.ToolCallTerminal(cur.Status) {
			done = cur
			return nil
		}
		if cur.Status == store.ToolCallWaitingApproval && cur.ApprovalID != "" {
			// The approval first: every path locks an approval before its call.
			a, err := st.q.ApprovalDecide(st.ctx, &store.ApprovalDecideParams{ID: cur.ApprovalID, Status: store.ApprovalCancelled, DecidedBy: "platform", Reason: reason, At: st.at})
			if err == nil {
				st.event(eventlog.TypeApprovalDecision, decisionPayload(a, st.at))
			} else if !errors.Is(err, store.ErrConflict) {
				return err
			}
		}
		done, err = st.finish(cur, []string{cur.Status}, store.ToolCallCancelled, nil, errorJSON("cancelled", reason, nil), 0)
		if err == nil && who.Admin {
			// An operator's cancel is an admin action (DESIGN §15).
			err = audit.WriteAs(st.ctx, st.q, audit.Admin, audit.ToolCallCancel, cur.ToolCallID,
				map[string]any{"run_id": cur.RunID, "session_id": cur.SessionID, "tool_name": cur.ToolName, "reason": reason})
		}
		if err == nil && cur.Kind == store.ToolKindAgent {
			// The call's execution is a child run: it stops with the call,
			// in the same commit.
			err = st.endChild(cur, "cancelled", "the "+cur.ToolName+" tool call that started this run was cancelled: "+reason)
		}
		if errors.Is(err, store.ErrConflict) {
			return errMovedOn // it moved on meanwhile; roll back and report it as it is
		}
		return err
	})
	if errors.Is(err, errMovedOn) {
		if c, err = s.st.ToolCallGet(ctx, id); err != nil {
			return nil, err
		}
		return View(c), nil
	}
	if err != nil {
		return nil, err
	}
	return View(done), nil
}
