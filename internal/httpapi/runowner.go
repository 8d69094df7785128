package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// maxRunOwners bounds the run → agent map; past it the map starts over.
const maxRunOwners = 8192

// runOwners remembers whose each run is: a run's agent never changes, so an
// agent key's x-run-id is checked against the store once per run, not on
// every call (tool invokes and waits send it every time).
type runOwners struct {
	mu sync.Mutex
	m  map[string]string // run id → agent id
}

func (o *runOwners) owner(ctx context.Context, st store.Store, runID string) (string, error) {
	o.mu.Lock()
	agentID, ok := o.m[runID]
	o.mu.Unlock()
	if ok {
		return agentID, nil
	}
	run, err := st.RunGet(ctx, runID)
	if err != nil {
		return "", err
	}
	o.mu.Lock()
	if o.m == nil || len(o.m) >= maxRunOwners {
		o.m = make(map[string]string)
	}
	o.m[runID] = run.AgentID
	o.mu.Unlock()
	return run.AgentID, nil
}

// checkRunHeader refuses an agent's request whose x-run-id names a run that
// is not that agent's, on every route (DESIGN §6: agents send x-run-id on
// every call; a run id that is not the calling agent's is refused, 403).
// Routes that need the run itself (callerRun) also require the header;
// here it is checked only when sent.
func (a *API) checkRunHeader(r *http.Request, p auth.Principal) error {
	id := r.Header.Get("x-run-id")
	if p.Kind != auth.Agent || id == "" {
		return nil
	}
	agentID, err := a.owners.owner(r.Context(), a.St, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && agentID != p.AgentID) {
		return respond.E(http.StatusForbidden, "forbidden", "run "+id+" is not this agent's")
	}
	return err
}
