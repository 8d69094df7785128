package toolsvc

import (
	"context"
	"errors"
	"strings"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// MaxReasonLen bounds a decision's reason.
const MaxReasonLen = 2000

// DecideParams is a human decision on an approval: from the session's
// client (approval_decision; UserID set) or over HTTP (admin; UserID "").
type DecideParams struct {
	ApprovalID string
	// RunID, when set, must be the approval's run.
	RunID string
	// UserID is the deciding user; the approval must be in that user's
	// session. Empty for the admin.
	UserID string
	// Decision is "approve" or "reject".
	Decision  string
	Reason    string
	DecidedBy string
}

// Decide records a decision. Approving dispatches the call in the same
// transaction, so among any number of racing deciders (and the expiry
// sweeper) exactly one wins and the tool runs at most once. A repeated
// identical decision returns the recorded approval; a different one, or one
// after the deadline, gets 409 with the recorded state.
func (s *Service) Decide(ctx context.Context, p DecideParams) (*store.Approval, error) {
	var want string
	switch p.Decision {
	case "approve", "approved":
		want = store.ApprovalApproved
	case "reject", "rejected":
		want = store.ApprovalRejected
	default:
		return nil, badRequest("invalid_decision", `decision must be "approve" or "reject"`)
	}
	if len(p.Reason) > MaxReasonLen {
		return nil, badRequest("invalid_request", "reason is too long")
	}
	a, err := s.st.ApprovalGet(ctx, p.ApprovalID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.RunID != "" && a.RunID != p.RunID) {
		return nil, ErrApprovalNotFound
	}
	if err != nil {
		return nil, err
	}
	if p.UserID != "" {
		sess, err := s.st.SessionGet(ctx, a.SessionID)
		if err != nil || sess.UserID != p.UserID {
			return nil, ErrApprovalNotFound // another user's approval is indistinguishable from none
		}
	}
	by := p.DecidedBy
	if by == "" {
		by = p.UserID
	}
	if by == "" {
		by = "admin"
	}

	// Who decided, for the audit log: the client's user over WebSocket,
	// the caller's key over HTTP.
	actor := audit.ActorFrom(ctx)
	switch {
	case actor != "":
	case p.UserID != "":
		actor = audit.User(p.UserID)
	default:
		actor = audit.Admin
	}

	var decided, current *store.Approval
	_, err = s.commit(ctx, a.SessionID, a.RunID, func(st *step) error {
		decided, current = nil, nil
		d, err := st.q.ApprovalDecide(st.ctx, &store.ApprovalDecideParams{ID: a.ApprovalID, Status: want, DecidedBy: by, Reason: p.Reason, At: st.at})
		if errors.Is(err, store.ErrConflict) {
			current = d
			if d.Status == store.ApprovalPending && st.at >= d.ExpiresAt {
				// Too late: record the expiry now rather than leave it to the sweeper.
				c, err := st.q.ToolCallGet(st.ctx, d.ToolCallID)
				if err != nil {
					return err
				}
				ex, err := st.expireApproval(c, 0)
				if ex != nil {
					current = ex
				}
				if errors.Is(err, store.ErrConflict) && ex != nil && ex.Status != store.ApprovalPending {
					return nil // decided meanwhile by another process; nothing written
				}
				return err
			}
			return nil
		}
		if err != nil {
			return err
		}
		decided = d
		st.event(eventlog.TypeApprovalDecision, decisionPayload(d, st.at))
		if err := audit.WriteAs(st.ctx, st.q, actor, audit.ApprovalDecide, d.ApprovalID, map[string]any{
			"decision": strings.ToLower(d.Status), "decided_by": d.DecidedBy, "reason": d.Reason,
			"tool_call_id": d.ToolCallID, "tool_name": d.ToolName, "run_id": d.RunID, "session_id": d.SessionID,
		}); err != nil {
			return err
		}
		c, err := st.q.ToolCallGet(st.ctx, d.ToolCallID)
		if err != nil {
			return err
		}
		if want == store.ApprovalApproved {
			_, err = st.dispatch(c)
		} else {
			msg := "rejected by " + by
			if p.Reason != "" {
				msg += ": " + p.Reason
			}
			_, err = st.finish(c, []string{store.ToolCallWaitingApproval}, store.ToolCallRejected, nil, errorJSON("rejected", msg, nil), 0)
		}
		return err // a call that moved on without its approval is a broken invariant: roll back
	})
	if err != nil {
		return nil, err
	}
	if decided != nil {
		return decided, nil
	}
	if current != nil && current.Status == want {
		return current, nil // the same decision again: answer what was recorded
	}
	if current == nil {
		current = a
	}
	code, msg := "approval_conflict", "the approval was already decided: "+strings.ToLower(current.Status)
	if current.Status == store.ApprovalExpired {
		code, msg = "approval_expired", "the approval expired before this decision"
	}
	return current, conflict(code, msg, map[string]any{"approval": current})
}

// expireApproval expires c's pending approval and ends c EXPIRED (the
// deadline passed with no decision: distinct from a rejection).
func (st *step) expireApproval(c *store.ToolCall, ifDueBy int64) (*store.Approval, error) {
	a, err := st.q.ApprovalDecide(st.ctx, &store.ApprovalDecideParams{ID: c.ApprovalID, Status: store.ApprovalExpired, DecidedBy: "platform", Reason: "no decision before the deadline", At: st.at})
	if err != nil {
		return a, err
	}
	st.event(eventlog.TypeApprovalDecision, decisionPayload(a, st.at))
	_, err = st.finish(c, []string{store.ToolCallWaitingApproval}, store.ToolCallExpired, nil, errorJSON("expired", "no approval decision before the deadline", nil), ifDueBy)
	return a, err
}

// ListApprovals lists approvals, oldest first, optionally only those in
// status.
func (s *Service) ListApprovals(ctx context.Context, status string, limit int) ([]*store.Approval, error) {
	return s.ListApprovalsPage(ctx, &store.ApprovalListParams{Status: status, Limit: limit})
}

// ListApprovalsPage lists one page of approvals (GET /v1/approvals): p's
// status is checked; no limit means 1000, and at most 10 000 are read.
func (s *Service) ListApprovalsPage(ctx context.Context, p *store.ApprovalListParams) ([]*store.Approval, error) {
	switch p.Status {
	case "", store.ApprovalPending, store.ApprovalApproved, store.ApprovalRejected, store.ApprovalExpired, store.ApprovalCancelled:
	default:
		return nil, badRequest("invalid_request", "status must be PENDING, APPROVED, REJECTED, EXPIRED or CANCELLED")
	}
	q := *p
	switch {
	case q.Limit <= 0:
		q.Limit = 1000
	case q.Limit > 10000:
		q.Limit = 10000
	}
	return s.st.ApprovalList(ctx, &q)
}
