package run

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
)

// CancelParams names the run to cancel and who asks. An empty UserID means
// an operator (admin key); otherwise the run must be that user's.
type CancelParams struct {
	RunID  string
	UserID string
	Reason string
}

// Cancel moves an active run to CANCELLED and closes the agent's request.
// Its descendants are cancelled first, by the same actor (EndTx).
func (m *Manager) Cancel(ctx context.Context, p CancelParams) (*store.Run, error) {
	run, err := m.st.RunGet(ctx, p.RunID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.UserID != "" && run.UserID != p.UserID) {
		return nil, ErrRunNotFound // another user's run is indistinguishable from none
	}
	if err != nil {
		return nil, err
	}
	if store.RunIsTerminal(run.Status) {
		return run, NotActive(run)
	}
	m.mu.Lock()
	a := m.active[run.RunID]
	m.mu.Unlock()
	if a != nil {
		// Hold the run lock from cancelling the request until the terminal
		// transition is queued, so no delta lands after run_cancelled.
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ended = true
		a.cancel(errCancelledByUser)
	}
	by := "operator"
	if p.UserID != "" {
		by = p.UserID
	}
	reason := p.Reason
	if reason == "" {
		reason = "cancelled by " + by
	}
	why := "the run was cancelled by " + by
	if p.Reason != "" {
		why += " (" + p.Reason + ")"
	}
	errJSON, _ := json.Marshal(map[string]string{"code": "cancelled", "message": reason})
	payload, _ := json.Marshal(map[string]any{"state": store.RunCancelled, "detail": map[string]string{"reason": reason, "by": by}, "source": eventlog.StateSourcePlatform})
	now := m.now()
	var ended []*store.Run
	// An operator's cancel is an admin action: audited in its transaction
	// (DESIGN §15). A user's is their own, in the event log.
	actor := ""
	if p.UserID == "" {
		actor = audit.ActorFrom(ctx)
	}
	_, err = m.log.Do(ctx, run.SessionID, func(txCtx context.Context, tx store.Queries) ([]store.EventParams, error) {
		var evs []store.EventParams
		var err error
		evs, ended, err = m.EndTx(txCtx, tx, run, now, End{Status: store.RunCancelled, Error: errJSON, Reason: why, CancelledBy: by, CancelState: payload})
		if err == nil && actor != "" && len(ended) > 0 {
			err = audit.WriteAs(txCtx, tx, actor, audit.RunCancel, run.RunID, map[string]any{"session_id": run.SessionID, "agent_id": run.AgentID, "reason": reason})
		}
		return evs, err
	})
	if err != nil {
		return nil, err
	}
	if len(ended) == 0 {
		cur, err := m.st.RunGet(ctx, run.RunID)
		if err != nil {
			return nil, err
		}
		return cur, NotActive(cur)
	}
	m.countEnded(ended)
	return ended[len(ended)-1], nil
}

func newMessageID() string { return ids.New("msg") }
