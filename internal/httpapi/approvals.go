package httpapi

import (
	"net/http"
	"strconv"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// approvalList serves GET /v1/approvals?status=PENDING&limit= (admin).
func (a *API) approvalList(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	list, err := a.Tools.ListApprovals(r.Context(), r.URL.Query().Get("status"), limit)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"approvals": list})
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
