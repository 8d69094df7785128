package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

// runFor loads a run p may see: the admin any run, an agent its own, a user
// the runs of its sessions.
func (a *API) runFor(r *http.Request, p auth.Principal, id string) (*store.Run, error) {
	rn, err := a.St.RunGet(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errRunNotFound
	}
	if err != nil {
		return nil, err
	}
	switch {
	case p.Kind == auth.Admin,
		p.Kind == auth.Agent && rn.AgentID == p.AgentID,
		p.Kind == auth.User && rn.UserID == p.UserID:
		return rn, nil
	}
	return nil, errRunNotFound
}

// runView is a run as the API shows it (DESIGN §7, §11): ended_at and
// error only once it has ended (never as null), usage always — the usage
// the agent reported, {} until it has — with its children and the total
// usage of its subtree.
type runView struct {
	*run.View
	Usage json.RawMessage `json:"usage"`
}

// normalizeRun returns a copy of rn without the fields an active run does
// not have yet.
func normalizeRun(rn *store.Run) *store.Run {
	c := *rn
	if !store.RunIsTerminal(c.Status) {
		c.EndedAt, c.Error = 0, nil
	}
	if string(c.Error) == "null" {
		c.Error = nil
	}
	return &c
}

func usageOrEmpty(u json.RawMessage) json.RawMessage {
	if len(u) == 0 || string(u) == "null" {
		return json.RawMessage("{}")
	}
	return u
}

func (a *API) runGet(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	rn, err := a.runFor(r, p, r.PathValue("run_id"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	v, err := a.Runs.View(r.Context(), normalizeRun(rn))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, runView{View: v, Usage: usageOrEmpty(v.Usage)})
}

// runTree serves GET /v1/runs/{run_id}/tree: the run and its descendants,
// nested, each with its own usage and its subtree's total (DESIGN §11).
func (a *API) runTree(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	rn, err := a.runFor(r, p, r.PathValue("run_id"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	t, err := a.Runs.Tree(r.Context(), rn)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, t)
}

// runEvents is the replay API of one run (admin, or the user who owns it).
func (a *API) runEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	if p.Kind == auth.Agent {
		respond.Err(w, r, errAdminOnly)
		return
	}
	rn, err := a.runFor(r, p, r.PathValue("run_id"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	a.writeEvents(w, r, &store.EventsListParams{SessionID: rn.SessionID, RunID: rn.RunID})
}

func (a *API) sessionEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	if p.Kind == auth.Agent {
		respond.Err(w, r, errAdminOnly)
		return
	}
	id := r.PathValue("session_id")
	if err := a.sessionAccess(r, p, id); err != nil {
		respond.Err(w, r, err)
		return
	}
	if follow, err := boolParam(r, "follow"); err != nil || follow {
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		a.followEvents(w, r, id)
		return
	}
	a.writeEvents(w, r, &store.EventsListParams{SessionID: id})
}

// writeEvents answers {events, next_after_seq} for ?after_seq=&limit=.
func (a *API) writeEvents(w http.ResponseWriter, r *http.Request, q *store.EventsListParams) {
	var err error
	if q.AfterSeq, err = intParam(r, "after_seq", 0); err != nil {
		respond.Err(w, r, err)
		return
	}
	limit, err := intParam(r, "limit", 1000)
	if err != nil || limit < 1 || limit > 10000 {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "limit must be 1..10000"))
		return
	}
	q.Limit = int(limit)
	evs, err := a.St.EventsList(r.Context(), q)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	next := q.AfterSeq
	if len(evs) > 0 {
		next = evs[len(evs)-1].Seq
	}
	respond.JSON(w, http.StatusOK, map[string]any{"events": evs, "next_after_seq": next})
}

func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, respond.E(http.StatusBadRequest, "invalid_param", name+" must be a non-negative integer")
	}
	return n, nil
}

// runVerb serves POST /v1/runs/{run_id}:cancel for operators and the
// owning user.
func (a *API) runVerb(w http.ResponseWriter, r *http.Request) {
	id, verb, ok := splitVerb(r.PathValue("verb"))
	if !ok || verb != "cancel" {
		respond.Err(w, r, respond.E(http.StatusNotFound, "not_found", "unknown run operation"))
		return
	}
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := respond.DecodeJSON(w, r, maxBody, &body); err != nil {
			respond.Err(w, r, err)
			return
		}
	}
	params := run.CancelParams{RunID: id, Reason: body.Reason}
	switch p.Kind {
	case auth.Admin:
	case auth.User:
		params.UserID = p.UserID
	default:
		respond.Err(w, r, errForbidden)
		return
	}
	rn, err := a.Runs.Cancel(a.auditCtx(r), params) // audited when the admin cancels
	if err != nil {
		respond.Err(w, r, err) // a 409 names the run's status
		return
	}
	v, err := a.Runs.View(r.Context(), normalizeRun(rn))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, runView{View: v, Usage: usageOrEmpty(v.Usage)})
}
