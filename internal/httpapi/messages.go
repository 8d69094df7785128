package httpapi

import (
	"net/http"
	"time"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

var messageRoles = map[string]bool{"user": true, "assistant": true, "system": true, "tool": true}

// sessionFor authenticates r and checks it may use the path's session.
func (a *API) sessionFor(w http.ResponseWriter, r *http.Request) (auth.Principal, string, bool) {
	p, ok := a.principal(w, r)
	if !ok {
		return p, "", false
	}
	id := r.PathValue("session_id")
	if err := a.sessionAccess(r, p, id); err != nil {
		respond.Err(w, r, err)
		return p, "", false
	}
	return p, id, true
}

func (a *API) messagesList(w http.ResponseWriter, r *http.Request) {
	_, id, ok := a.sessionFor(w, r)
	if !ok {
		return
	}
	limit, err := intParam(r, "limit", 100)
	if err != nil || limit < 1 || limit > 1000 {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "limit must be 1..1000"))
		return
	}
	msgs, err := a.St.MessagesList(r.Context(), &store.MessagesListParams{SessionID: id, Before: r.URL.Query().Get("before"), Limit: int(limit)})
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	next := ""
	if len(msgs) == int(limit) {
		next = msgs[0].MessageID
	}
	respond.JSON(w, http.StatusOK, map[string]any{"messages": msgs, "next_before": next})
}

func (a *API) messageAppend(w http.ResponseWriter, r *http.Request) {
	p, id, ok := a.sessionFor(w, r)
	if !ok {
		return
	}
	var body struct {
		Role    string  `json:"role"`
		Content *string `json:"content"`
	}
	if err := respond.DecodeJSON(w, r, maxBody, &body); err != nil {
		respond.Err(w, r, err)
		return
	}
	if !messageRoles[body.Role] || body.Content == nil {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_message", "role must be user|assistant|system|tool and content a string"))
		return
	}
	mp := &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: id, Role: body.Role, Content: *body.Content, CreatedAt: time.Now().UnixMilli()}
	if p.Kind == auth.Agent {
		// The agent's run (sessionAccess checked it is its own, in this
		// session): the row says whose turn it is, a child's included.
		rn, err := a.callerRun(r, p)
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		mp.RunID, mp.AgentID, mp.ParentRunID, mp.IntentionID = rn.RunID, rn.AgentID, rn.ParentRunID, rn.IntentionID
	}
	m, err := a.St.MessageAppend(r.Context(), mp)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusCreated, m)
}
