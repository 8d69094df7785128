package httpapi

import (
	"net/http"

	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/respond"
)

// MCP servers as tool sources (DESIGN §13), admin only: a stdio server's
// command runs on the platform's host, so registering one is the
// administrator's call alone.

// mcpServerPut registers or replaces an MCP server. Unknown fields are
// refused, the URL must pass the endpoint allowlist; the answer does not
// wait for the connection (GET shows its status).
func (a *API) mcpServerPut(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	name := r.PathValue("name")
	raw, err := respond.ReadBody(w, r, maxBody)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	spec, err := mcpclient.DecodeSpec(raw)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	if spec.Name != "" && spec.Name != name {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_mcp_server", "name in the body ("+spec.Name+") differs from the path ("+name+")"))
		return
	}
	spec.Name = name
	info, created, err := a.MCP.Put(a.auditCtx(r), spec)
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

func (a *API) mcpServerGet(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	info, err := a.MCP.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, info)
}

func (a *API) mcpServerList(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	list, err := a.MCP.List(r.Context())
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"mcp_servers": list})
}

// mcpServerDelete removes a server and stops its session (and process).
// Per-tool overrides of its tools are kept.
func (a *API) mcpServerDelete(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	if err := a.MCP.Delete(a.auditCtx(r), r.PathValue("name")); err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"ok": true})
}
