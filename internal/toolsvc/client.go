package toolsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// ClientResult is a tool_result from the user's client.
type ClientResult struct {
	UserID     string // the connection's user
	RunID      string
	ToolCallID string
	OK         bool
	Result     json.RawMessage
	// Error is the client's {code, message} when OK is false.
	Error json.RawMessage
}

// SubmitClientResult ends a WAITING_CLIENT call with the client's answer.
// A result for another user's call, an unknown call, a server call, or one
// that is no longer waiting (late, duplicate) is refused and changes
// nothing.
func (s *Service) SubmitClientResult(ctx context.Context, r ClientResult) (*CallView, error) {
	c, err := s.st.ToolCallGet(ctx, r.ToolCallID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.RunID != "" && c.RunID != r.RunID) {
		return nil, ErrToolCallNotFound
	}
	if err != nil {
		return nil, err
	}
	if sess, err := s.st.SessionGet(ctx, c.SessionID); err != nil || sess.UserID != r.UserID {
		return nil, ErrToolCallNotFound // another user's call is indistinguishable from none
	}
	if c.Kind != store.ToolKindClient {
		return nil, respond.E(http.StatusConflict, "not_a_client_tool", c.ToolName+" is a server tool; its result comes from its endpoint")
	}
	if c.Status != store.ToolCallWaitingClient {
		return nil, notWaiting(c)
	}
	status, result, errJSON := store.ToolCallSucceeded, r.Result, json.RawMessage(nil)
	if len(bytes.TrimSpace(result)) == 0 {
		result = json.RawMessage("null")
	}
	if !r.OK {
		status, result = store.ToolCallFailed, nil
		var ce struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(r.Error, &ce)
		msg := "the client could not run the tool"
		if ce.Message != "" {
			msg += ": " + ce.Message
		}
		var detail json.RawMessage
		if json.Valid(r.Error) {
			detail = r.Error
		}
		errJSON = errorJSON("tool_error", msg, detail)
	}
	var done *store.ToolCall
	var current *store.ToolCall
	_, err = s.commit(ctx, c.SessionID, c.RunID, func(st *step) error {
		done, current = nil, nil
		if c.DeadlineAt > 0 && st.at >= c.DeadlineAt {
			// Too late: the answer was due before deadline_ts. The call
			// times out now, as the sweeper would have it a moment later,
			// and the answer is dropped — not taken because the sweeper
			// had not come round yet (found by an external audit).
			d, err := st.timeOut(c, st.at)
			current = d
			if errors.Is(err, store.ErrConflict) {
				return nil
			}
			return err
		}
		d, err := st.finish(c, []string{store.ToolCallWaitingClient}, status, result, errJSON, 0)
		if errors.Is(err, store.ErrConflict) {
			current = d
			return nil
		}
		done = d
		return err
	})
	if err != nil {
		return nil, err
	}
	if done == nil {
		return nil, notWaiting(current)
	}
	return View(done), nil
}

func notWaiting(c *store.ToolCall) error {
	return conflict("tool_call_not_waiting", "the tool call is not waiting for a result (it is "+c.Status+")",
		map[string]any{"tool_call_id": c.ToolCallID, "state": c.Status})
}

// Pending returns what a session's client still has to act on, as client
// messages: the tool_requests of its waiting client calls and the
// approval_requireds of its pending approvals. The ingress sends them again
// after a subscribe (without seq: the log already delivered them once).
func (s *Service) Pending(ctx context.Context, sessionID string) ([]map[string]any, error) {
	calls, err := s.st.ToolCallListPendingClient(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	aps, err := s.st.ApprovalList(ctx, &store.ApprovalListParams{Status: store.ApprovalPending, SessionID: sessionID, Limit: 1000})
	if err != nil {
		return nil, err
	}
	now := s.now()
	var out []map[string]any
	for _, a := range aps {
		if a.ExpiresAt <= now {
			continue
		}
		m := approvalRequired(a)
		m["type"], m["session_id"], m["run_id"], m["ts"], m["resent"] = "approval_required", a.SessionID, a.RunID, now, true
		if err := s.addParentRun(ctx, m, a.RunID); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	for _, c := range calls {
		if c.Status != store.ToolCallWaitingClient || c.DeadlineAt <= now {
			continue
		}
		m := toolRequest(c)
		m["type"], m["session_id"], m["run_id"], m["ts"], m["resent"] = "tool_request", c.SessionID, c.RunID, now, true
		if err := s.addParentRun(ctx, m, c.RunID); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// addParentRun gives a resent message the parent_run_id its logged original
// carried: a child run's tool_request or approval_required names its parent,
// a root run's has none (the ingress's envelope, messages.go).
func (s *Service) addParentRun(ctx context.Context, m map[string]any, runID string) error {
	run, err := s.RunFacts(ctx, runID)
	if err != nil {
		return err
	}
	if run.ParentRunID != "" {
		m["parent_run_id"] = run.ParentRunID
	}
	return nil
}
