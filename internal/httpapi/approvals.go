package httpapi

import (
	"net/http"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// approvalList serves GET /v1/approvals?status=&limit=&cursor=&order=:
// the admin sees every approval, a user key those of its own sessions
// (read only: deciding over HTTP takes the admin key). Oldest first
// unless order=desc.
func (a *API) approvalList(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	params := store.ApprovalListParams{Status: r.URL.Query().Get("status"), SessionID: r.URL.Query().Get("session_id")}
	switch p.Kind {
	case auth.Admin:
	case auth.User:
		params.UserID = p.UserID
	default:
		respond.Err(w, r, errAdminOnly)
		return
	}
	limit, err := limitParam(r, 1000, 1000)
	if err == nil {
		params.Desc, err = orderParam(r, "asc")
	}
	list := "approvals"
	if params.Desc {
		list = "approvals-desc"
	}
	var c *cursor
	if err == nil {
		c, err = decodeCursor(r, list)
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	params.After = c.storeCursor()
	params.Limit = limit + 1
	approvals, err := a.Tools.ListApprovalsPage(r.Context(), &params)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	next := ""
	if len(approvals) > limit {
		approvals = approvals[:limit]
		last := approvals[limit-1]
		next = encodeCursor(list, last.CreatedAt, last.ApprovalID)
	}
	respond.JSON(w, http.StatusOK, map[string]any{"approvals": approvals, "next_cursor": next})
}

// decideRequest is the body of POST /v1/approvals/{id}:decide.
type decideRequest struct {
	Decision  string `json:"decision"`
	Reason    string `json:"reason"`
	DecidedBy string `json:"decided_by"`
}

// approvalVerb serves POST /v1/approvals/{approval_id}:decide (admin). A
// repeated identical decision answers 200 with the recorded approval; a
// different one 409 with it.
func (a *API) approvalVerb(w http.ResponseWriter, r *http.Request) {
	id, verb, ok := splitVerb(r.PathValue("verb"))
	if !ok || verb != "decide" {
		respond.Err(w, r, respond.E(http.StatusNotFound, "not_found", "unknown approval action; use POST /v1/approvals/{approval_id}:decide"))
		return
	}
	if !a.admin(w, r) {
		return
	}
	var req decideRequest
	if err := respond.DecodeJSON(w, r, maxBody, &req); err != nil {
		respond.Err(w, r, err)
		return
	}
	ap, err := a.Tools.Decide(a.auditCtx(r), toolsvc.DecideParams{ApprovalID: id, Decision: req.Decision, Reason: req.Reason, DecidedBy: req.DecidedBy})
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, ap)
}
