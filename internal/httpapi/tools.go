package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// toolPutBody is a definition as PUT takes it. The timestamps GET adds
// are accepted and ignored, so a definition read back (GET, or `tools list
// --json`) can be edited and PUT again.
type toolPutBody struct {
	tool.Definition
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedAt json.RawMessage `json:"updated_at"`
}

// toolPut registers or replaces a tool (admin). Unknown fields are refused
// so that a misspelt "polcy" cannot silently leave a tool open.
func (a *API) toolPut(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	name := r.PathValue("tool_name")
	var body toolPutBody
	if err := respond.DecodeJSONStrict(w, r, maxBody, &body); err != nil {
		if e := respond.As(err); e != nil {
			// encoding/json names a field of the embedded Definition by its
			// Go path ("Definition.timeout_ms"); the client wrote timeout_ms.
			e.Message = strings.TrimPrefix(e.Message, "Definition.")
		}
		respond.Err(w, r, err)
		return
	}
	d := body.Definition
	if d.Name != "" && d.Name != name {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_tool", "tool_name in the body ("+d.Name+") differs from the path ("+name+")"))
		return
	}
	d.Name = name
	info, created, err := a.Tools.PutTool(a.auditCtx(r), d)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	respond.JSON(w, status, info)
}

func (a *API) toolGet(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	info, err := a.Tools.GetTool(r.Context(), r.PathValue("tool_name"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, info)
}

func (a *API) toolDelete(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	if err := a.Tools.DeleteTool(a.auditCtx(r), r.PathValue("tool_name")); err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"ok": true})
}

// toolList shows the admin every definition, and an agent the tools it may
// call as OpenAI function-calling tools (run_id, when given, must be its).
func (a *API) toolList(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	switch p.Kind {
	case auth.Admin:
		limit, err := limitParam(r, 1000, 1000)
		var c *cursor
		if err == nil {
			c, err = decodeCursor(r, "tools")
		}
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		after := ""
		if c != nil {
			after = c.ID
		}
		list, last, err := a.Tools.ListToolsPage(r.Context(), after, limit)
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		next := ""
		if last != "" {
			next = encodeCursor("tools", 0, last)
		}
		respond.JSON(w, http.StatusOK, map[string]any{"tools": list, "next_cursor": next})
	case auth.Agent:
		if id := r.URL.Query().Get("run_id"); id != "" {
			rn, err := a.St.RunGet(r.Context(), id)
			if err != nil || rn.AgentID != p.AgentID {
				respond.Err(w, r, toolsvc.ErrRunForbidden)
				return
			}
		}
		list, err := a.Tools.ToolsForAgent(r.Context(), p.AgentID)
		if err != nil {
			respond.Err(w, r, err)
			return
		}
		respond.JSON(w, http.StatusOK, map[string]any{"tools": list})
	default:
		respond.Err(w, r, errForbidden)
	}
}

// invokeRequest is the body of POST /v1/tools/{tool_name}:invoke.
type invokeRequest struct {
	RunID          string          `json:"run_id"`
	Args           json.RawMessage `json:"args"`
	IdempotencyKey string          `json:"idempotency_key"`
	TimeoutMS      int64           `json:"timeout_ms"`
}

// toolVerb serves POST /v1/tools/{tool_name}:invoke (agent key).
func (a *API) toolVerb(w http.ResponseWriter, r *http.Request) {
	name, verb, ok := splitVerb(r.PathValue("verb"))
	if !ok || verb != "invoke" {
		respond.Err(w, r, respond.E(http.StatusNotFound, "not_found", "unknown tool action; use POST /v1/tools/{tool_name}:invoke"))
		return
	}
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	if p.Kind != auth.Agent {
		respond.Err(w, r, respond.E(http.StatusForbidden, "forbidden", "tools are invoked with an agent key"))
		return
	}
	var req invokeRequest
	if err := respond.DecodeJSON(w, r, maxBody, &req); err != nil {
		respond.Err(w, r, err)
		return
	}
	if req.RunID == "" {
		req.RunID = r.Header.Get("x-run-id")
	}
	if h := r.Header.Get("x-run-id"); h != "" && h != req.RunID {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_request", "x-run-id differs from the body's run_id"))
		return
	}
	view, err := a.Tools.Invoke(r.Context(), toolsvc.InvokeParams{
		AgentID: p.AgentID, RunID: req.RunID, ToolName: name, Args: req.Args,
		IdempotencyKey: req.IdempotencyKey, TimeoutMS: req.TimeoutMS,
	})
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, view)
}

// toolCaller is who may read tool calls: the admin, or an agent (its own).
func (a *API) toolCaller(w http.ResponseWriter, r *http.Request) (toolsvc.Caller, bool) {
	p, ok := a.principal(w, r)
	if !ok {
		return toolsvc.Caller{}, false
	}
	switch p.Kind {
	case auth.Admin:
		return toolsvc.Caller{Admin: true}, true
	case auth.Agent:
		return toolsvc.Caller{AgentID: p.AgentID}, true
	}
	respond.Err(w, r, errForbidden)
	return toolsvc.Caller{}, false
}

func (a *API) toolCallGet(w http.ResponseWriter, r *http.Request) {
	who, ok := a.toolCaller(w, r)
	if !ok {
		return
	}
	v, err := a.Tools.Get(r.Context(), who, r.PathValue("tool_call_id"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, v)
}

// toolCallVerb serves POST /v1/tool_calls/{id}:wait?timeout_ms= — a
// long-poll woken by the call's final state (DESIGN §6) — and
// POST /v1/tool_calls/{id}:cancel.
func (a *API) toolCallVerb(w http.ResponseWriter, r *http.Request) {
	id, verb, ok := splitVerb(r.PathValue("verb"))
	if !ok || (verb != "wait" && verb != "cancel") {
		respond.Err(w, r, respond.E(http.StatusNotFound, "not_found", "unknown tool call action; use POST /v1/tool_calls/{id}:wait or :cancel"))
		return
	}
	who, ok := a.toolCaller(w, r)
	if !ok {
		return
	}
	if verb == "cancel" {
		a.toolCallCancel(w, r, who, id)
		return
	}
	timeout, err := waitTimeout(r.URL.Query().Get("timeout_ms"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	v, err := a.Tools.Wait(r.Context(), who, id, timeout)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, v)
}

func waitTimeout(s string) (d time.Duration, err error) {
	if s == "" {
		return toolsvc.DefaultWait, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > toolsvc.MaxWait {
		return 0, respond.E(http.StatusBadRequest, "invalid_request", "timeout_ms must be between 0 and "+strconv.FormatInt(toolsvc.MaxWait.Milliseconds(), 10))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// toolCallCancel serves POST /v1/tool_calls/{id}:cancel {reason?}: the
// call ends CANCELLED unless it has ended already (then it is returned as
// it is), and its run goes on.
func (a *API) toolCallCancel(w http.ResponseWriter, r *http.Request, who toolsvc.Caller, id string) {
	var req struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := respond.DecodeJSON(w, r, maxBody, &req); err != nil {
			respond.Err(w, r, err)
			return
		}
	}
	v, err := a.Tools.Cancel(r.Context(), who, id, req.Reason)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, v)
}
