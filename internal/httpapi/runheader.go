package httpapi

import (
	"errors"
	"net/http"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// checkRunHeader refuses an agent's request whose x-run-id names a run that
// is not that agent's, on every route (DESIGN §6: agents send x-run-id on
// every call; a run id that is not the calling agent's is refused, 403).
// Routes that need the run itself (callerRun) also require the header;
// here it is checked only when sent. A run's agent never changes: the tool
// service's run facts keep it, so this is one store read per run, not per
// call (tool invokes and waits send the header every time).
func (a *API) checkRunHeader(r *http.Request, p auth.Principal) error {
	id := r.Header.Get("x-run-id")
	if p.Kind != auth.Agent || id == "" {
		return nil
	}
	run, err := a.Tools.RunFacts(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.AgentID != p.AgentID) {
		return respond.E(http.StatusForbidden, "forbidden", "run "+id+" is not this agent's")
	}
	return err
}
