package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// runStatusFilters are the values GET /v1/runs?status= takes besides the
// run states themselves.
var runStatusFilters = map[string][]string{
	"active": store.RunActiveStatuses,
	"ended":  store.RunTerminalStatuses, // INPUT_REQUIRED too: final for the run (DESIGN §8)
}

// runList serves GET /v1/runs (issue 11): the admin lists every run, a
// user key only the runs of its sessions. Newest first unless order=asc.
func (a *API) runList(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	params := store.RunListParams{SessionID: q.Get("session_id"), UserID: q.Get("user_id"), AgentID: q.Get("agent_id"), ParentRunID: q.Get("parent_run_id")}
	switch p.Kind {
	case auth.Admin:
	case auth.User:
		if params.UserID != "" && params.UserID != p.UserID {
			respond.JSON(w, http.StatusOK, map[string]any{"runs": []any{}, "next_cursor": ""})
			return
		}
		params.UserID = p.UserID
	default:
		respond.Err(w, r, errForbidden)
		return
	}
	if s := q.Get("status"); s != "" {
		for _, v := range strings.Split(s, ",") {
			if group, ok := runStatusFilters[v]; ok {
				params.Statuses = append(params.Statuses, group...)
			} else if store.RunIsTerminal(v) || v == store.RunQueued || v == store.RunRunning || v == store.RunPausedWaitingApproval || v == store.RunPausedWaitingTool {
				params.Statuses = append(params.Statuses, v)
			} else {
				respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "status must be active, ended or run states (RUNNING, DONE, …), comma-separated"))
				return
			}
		}
	}
	var err error
	params.RootOnly, err = boolParam(r, "root")
	var desc bool
	if err == nil {
		desc, err = orderParam(r, "desc")
	}
	params.Asc = !desc
	if err == nil {
		params.Since, err = timeParam(r, "since")
	}
	if err == nil {
		params.Until, err = timeParam(r, "until")
	}
	if err == nil {
		params.Limit, err = limitParam(r, 100, 1000)
	}
	list := "runs"
	if params.Asc {
		list = "runs-asc"
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
	limit := params.Limit
	params.Limit++
	runs, err := a.St.RunList(r.Context(), &params)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	next := ""
	if len(runs) > limit {
		runs = runs[:limit]
		last := runs[limit-1]
		next = encodeCursor(list, last.StartedAt, last.RunID)
	}
	// Each as GET /v1/runs/{id} shows it, but for its children and total
	// usage (a tree per row; GET /v1/runs/{id}/tree has them).
	items := make([]listedRun, len(runs))
	for i, rn := range runs {
		n := normalizeRun(rn)
		items[i] = listedRun{Run: n, Usage: usageOrEmpty(n.Usage)}
	}
	respond.JSON(w, http.StatusOK, map[string]any{"runs": items, "next_cursor": next})
}

// listedRun is a run as GET /v1/runs lists it: usage is always an object
// ({} until the run reports some), as in GET /v1/runs/{id}.
type listedRun struct {
	*store.Run
	Usage json.RawMessage `json:"usage"`
}
