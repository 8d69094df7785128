package run

import (
	"context"
	"encoding/json"
	"errors"

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
func (m *Manager) Cancel(ctx context.Context, p CancelParams) (*store.Run, error) {
	run, err := m.st.RunGet(ctx, p.RunID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.UserID != "" && run.UserID != p.UserID) {
		return nil, ErrRunNotFound // another user's run is indistinguishable from none
	}
	if err != nil {
		return nil, err
	}
	if store.RunIsTerminal(run.Status) {
		return run, ErrRunNotActive
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
	var out *store.Run
	_, err = m.log.Do(ctx, run.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		r, err := tx.RunTransition(ctx, &store.RunTransitionParams{RunID: run.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: now, Error: errJSON})
		out = r
		if err != nil {
			return nil, err
		}
		cascade, err := m.onEnd(ctx, tx, run, now, why)
		if err != nil {
			return nil, err
		}
		return append(cascade, store.EventParams{SessionID: run.SessionID, RunID: run.RunID, ParentRunID: run.ParentRunID, TS: now, Type: eventlog.TypeRunCancelled, Payload: payload}), nil
	})
	if errors.Is(err, store.ErrConflict) {
		return out, ErrRunNotActive
	}
	if err != nil {
		return nil, err
	}
	m.ended(run, store.RunCancelled, "", now)
	return out, nil
}

func newMessageID() string { return ids.New("msg") }
