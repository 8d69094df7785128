package httpapi

import (
	"net/http"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
)

// whoami serves GET /v1/whoami: which principal the bearer key is, so a
// console or a script can tell an admin key from a user's before it
// offers what only one of them may do.
func (a *API) whoami(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	body := map[string]any{"kind": p.Kind}
	switch p.Kind {
	case auth.User:
		body["user_id"] = p.UserID
	case auth.Agent:
		body["agent_id"] = p.AgentID
	}
	respond.JSON(w, http.StatusOK, body)
}
