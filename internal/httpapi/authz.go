package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

var (
	errForbidden    = respond.E(http.StatusForbidden, "forbidden", "this key may not do that")
	errAdminOnly    = respond.E(http.StatusForbidden, "forbidden", "the admin key is required")
	errRunNotFound  = respond.E(http.StatusNotFound, "run_not_found", "no such run")
	errSessNotFound = run.ErrSessionNotFound // the same answer as agent_invoke's and subscribe's
)

// principal authenticates r or writes 401 (403 for an agent whose x-run-id
// is another's run) and returns ok=false.
func (a *API) principal(w http.ResponseWriter, r *http.Request) (auth.Principal, bool) {
	p, err := a.Keys.Request(r)
	if err == nil {
		err = a.checkRunHeader(r, p)
	}
	if err != nil {
		respond.Err(w, r, err)
		return p, false
	}
	return p, true
}

func (a *API) admin(w http.ResponseWriter, r *http.Request) bool {
	p, ok := a.principal(w, r)
	if !ok {
		return false
	}
	if p.Kind != auth.Admin {
		respond.Err(w, r, errAdminOnly)
		return false
	}
	return true
}

// auditCtx is r's context naming the admin as the actor of what the
// handler changes (audit log, DESIGN §15); for handlers that passed admin.
func (a *API) auditCtx(r *http.Request) context.Context {
	return audit.WithActor(r.Context(), audit.Admin)
}

// callerRun is the run an agent says it acts for (x-run-id). It must be
// that agent's (DESIGN §6: otherwise 403).
func (a *API) callerRun(r *http.Request, p auth.Principal) (*store.Run, error) {
	id := r.Header.Get("x-run-id")
	if id == "" {
		return nil, respond.E(http.StatusBadRequest, "missing_run_id", "send the x-run-id header of the run this call belongs to")
	}
	run, err := a.St.RunGet(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, respond.E(http.StatusForbidden, "forbidden", "run "+id+" is not this agent's")
	}
	if err != nil {
		return nil, err
	}
	if run.AgentID != p.AgentID {
		return nil, respond.E(http.StatusForbidden, "forbidden", "run "+id+" is not this agent's")
	}
	return run, nil
}

// sessionAccess checks p may read or write session id: the admin, the user
// owning it, or an agent acting for one of its runs in that session.
func (a *API) sessionAccess(r *http.Request, p auth.Principal, id string) error {
	switch p.Kind {
	case auth.Admin:
		if _, err := a.St.SessionGet(r.Context(), id); errors.Is(err, store.ErrNotFound) {
			return errSessNotFound
		} else if err != nil {
			return err
		}
		return nil
	case auth.User:
		s, err := a.St.SessionGet(r.Context(), id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && s.UserID != p.UserID) {
			return errSessNotFound
		}
		return err
	case auth.Agent:
		run, err := a.callerRun(r, p)
		if err != nil {
			return err
		}
		if run.SessionID != id {
			return respond.E(http.StatusForbidden, "forbidden", "run "+run.RunID+" is not in session "+id)
		}
		return nil
	}
	return errForbidden
}

// splitVerb splits "id:verb" on the last colon (DESIGN §6: ServeMux
// wildcards cannot express the suffix).
func splitVerb(s string) (id, verb string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}
