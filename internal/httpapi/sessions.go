package httpapi

import (
	"net/http"
	"strings"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// sessionList serves GET /v1/sessions (issue 11): the admin lists every
// session, a user key only its own (another user's id filters to nothing,
// as its sessions answer session_not_found). Newest first, keyset-paged.
func (a *API) sessionList(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	params := store.SessionListParams{UserID: q.Get("user_id"), AgentID: q.Get("agent_id"), IDPrefix: strings.TrimSpace(q.Get("q"))}
	switch p.Kind {
	case auth.Admin:
	case auth.User:
		if params.UserID != "" && params.UserID != p.UserID {
			respond.JSON(w, http.StatusOK, map[string]any{"sessions": []any{}, "next_cursor": ""})
			return
		}
		params.UserID = p.UserID
	default:
		respond.Err(w, r, errForbidden)
		return
	}
	switch params.Status = q.Get("status"); params.Status {
	case "", store.SessionActive, store.SessionEnded:
	default:
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "status must be active or ended"))
		return
	}
	var err error
	if params.Since, err = timeParam(r, "since"); err == nil {
		params.Until, err = timeParam(r, "until")
	}
	if err == nil {
		params.Limit, err = limitParam(r, 50, 1000)
	}
	var c *cursor
	if err == nil {
		c, err = decodeCursor(r, "sessions")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	params.After = c.storeCursor()
	limit := params.Limit
	params.Limit++ // one more tells whether there is a next page
	list, err := a.St.SessionList(r.Context(), &params)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		last := list[limit-1]
		next = encodeCursor("sessions", last.CreatedAt, last.SessionID)
	}
	respond.JSON(w, http.StatusOK, map[string]any{"sessions": list, "next_cursor": next})
}
