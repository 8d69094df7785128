package httpapi

import (
	"errors"
	"net/http"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/retention"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

var errSessionActive = respond.E(http.StatusConflict, "session_busy", "the session has an active or queued run; cancel it first, or delete with ?force=true")

// sessionDelete serves DELETE /v1/sessions/{session_id}?force= (admin):
// every row of the session goes now — events, transcript, runs, tool
// calls, approvals — and an audit row records it with the counts. A
// session with an active or queued run answers 409 session_busy, unless
// force=true: its runs are cancelled first.
func (a *API) sessionDelete(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	if a.Retention == nil {
		respond.Err(w, r, respond.E(http.StatusNotImplemented, "not_supported", "session deletion is not available on this process"))
		return
	}
	id := r.PathValue("session_id")
	ctx := a.auditCtx(r)
	force, err := boolParam(r, "force")
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	var cancelled []string
	if force {
		active, err := a.St.SessionActiveRuns(ctx, id)
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		for _, rn := range active {
			if rn.ParentRunID != "" {
				continue // a root's cancel cascades to its children
			}
			_, err := a.Runs.Cancel(ctx, run.CancelParams{RunID: rn.RunID, Reason: "the session is being deleted"})
			if err != nil && !errors.Is(err, run.ErrRunNotActive) {
				respond.Err(w, r, err)
				return
			}
			cancelled = append(cancelled, rn.RunID)
		}
	}
	detail := map[string]any{"force": force}
	if len(cancelled) > 0 {
		detail["cancelled_runs"] = cancelled
	}
	counts, err := a.Retention.Delete(ctx, id, detail)
	switch {
	case errors.Is(err, retention.ErrActive):
		err = errSessionActive
	case errors.Is(err, store.ErrNotFound):
		err = errSessNotFound
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"ok": true, "session_id": id, "deleted": counts, "cancelled_runs": nonNil(cancelled)})
}
