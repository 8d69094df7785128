// Package httpapi is agentplane's HTTP surface for operators and agents
// (DESIGN §6–§7): one handler file per resource, every route registered in
// Routes.
package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/retention"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// maxBody bounds JSON request bodies of the management API.
const maxBody = 1 << 20

// API holds what the handlers need.
type API struct {
	St    store.Store
	Log   *eventlog.Log
	Keys  *auth.Keys
	Runs  *run.Manager
	Allow *agent.Allowlist
	// Ready reports readiness beyond the store answering (false while
	// shutting down).
	Ready   func() bool
	Logger  *slog.Logger
	Metrics *metrics.Registry
	Tools   *toolsvc.Service
	// Retention deletes sessions (DELETE /v1/sessions/{id}).
	Retention *retention.Sweeper
	// AgentKeyGrace keeps an agent's previous key valid this long after
	// rotate_key (limits.agent_key_grace_seconds; 0: none).
	AgentKeyGrace time.Duration
	MCP           *mcpclient.Manager
	// FetchCard fetches and checks a remote A2A agent's card at
	// registration (protocol "a2a"); nil refuses such agents. Its errors
	// are *respond.Error.
	FetchCard func(ctx context.Context, endpoint string) (json.RawMessage, error)
	// Closing, when set, is done once the server shuts down: long-lived
	// streams (events?follow=1) end then instead of holding the shutdown.
	Closing context.Context

	streams atomic.Int64 // open follow streams
}

// Routes registers every management route on mux.
func (a *API) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /metrics", a.metrics)

	mux.HandleFunc("POST /v1/agents/register", a.agentRegister)
	mux.HandleFunc("GET /v1/agents", a.agentList)
	mux.HandleFunc("GET /v1/agents/{agent_id}", a.agentGet)
	mux.HandleFunc("DELETE /v1/agents/{agent_id}", a.agentDelete)
	mux.HandleFunc("POST /v1/agents/{verb}", a.agentVerb) // {agent_id}:heartbeat, {agent_id}:invoke

	mux.HandleFunc("GET /v1/runs/{run_id}", a.runGet)
	mux.HandleFunc("GET /v1/runs/{run_id}/tree", a.runTree)
	mux.HandleFunc("GET /v1/runs/{run_id}/events", a.runEvents)
	mux.HandleFunc("POST /v1/runs/{verb}", a.runVerb) // {run_id}:cancel

	mux.HandleFunc("GET /v1/sessions/{session_id}/events", a.sessionEvents)
	mux.HandleFunc("GET /v1/sessions/{session_id}/messages", a.messagesList)
	mux.HandleFunc("POST /v1/sessions/{session_id}/messages", a.messageAppend)

	mux.HandleFunc("GET /v1/tools", a.toolList)
	mux.HandleFunc("PUT /v1/tools/{tool_name}", a.toolPut)
	mux.HandleFunc("GET /v1/tools/{tool_name}", a.toolGet)
	mux.HandleFunc("DELETE /v1/tools/{tool_name}", a.toolDelete)
	mux.HandleFunc("POST /v1/tools/{verb}", a.toolVerb) // {tool_name}:invoke
	mux.HandleFunc("GET /v1/tool_calls/{tool_call_id}", a.toolCallGet)
	mux.HandleFunc("POST /v1/tool_calls/{verb}", a.toolCallVerb) // {tool_call_id}:wait, :cancel
	mux.HandleFunc("GET /v1/approvals", a.approvalList)
	mux.HandleFunc("POST /v1/approvals/{verb}", a.approvalVerb) // {approval_id}:decide

	mux.HandleFunc("GET /v1/mcp_servers", a.mcpServerList)
	mux.HandleFunc("PUT /v1/mcp_servers/{name}", a.mcpServerPut)
	mux.HandleFunc("GET /v1/mcp_servers/{name}", a.mcpServerGet)
	mux.HandleFunc("DELETE /v1/mcp_servers/{name}", a.mcpServerDelete)

	mux.HandleFunc("PUT /v1/context/{key...}", a.contextPut)
	mux.HandleFunc("GET /v1/context/{key...}", a.contextGet)

	// Operator listings (issue 11); GET /v1/sessions/{id}/events?follow=1
	// is the live form of the session's events above.
	mux.HandleFunc("GET /v1/whoami", a.whoami)
	mux.HandleFunc("GET /v1/sessions", a.sessionList)
	mux.HandleFunc("GET /v1/runs", a.runList)
	mux.HandleFunc("GET /v1/usage", a.usageList)
	if a.Metrics != nil {
		a.Metrics.GaugeFunc("agentplane_event_streams", "Open follow streams (GET /v1/sessions/{id}/events?follow=1).", func() float64 { return float64(a.streams.Load()) })
	}

	// Governance (DESIGN §15).
	mux.HandleFunc("GET /v1/audit", a.auditList)
	mux.HandleFunc("DELETE /v1/sessions/{session_id}", a.sessionDelete)
	mux.HandleFunc("POST /v1/users/{user_id}/keys", a.userKeyCreate)
	mux.HandleFunc("GET /v1/users/{user_id}/keys", a.userKeyList)
	mux.HandleFunc("DELETE /v1/users/{user_id}/keys/{key_id}", a.userKeyDelete)
}

func (a *API) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}` + "\n"))
}

// metrics serves the Prometheus text format (admin key: nothing is open by
// default, DESIGN §2.6; scrapers send it as a bearer token).
func (a *API) metrics(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	a.Metrics.Handler().ServeHTTP(w, r)
}

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2e9)
	defer cancel()
	if a.Ready != nil && !a.Ready() {
		respond.JSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "reason": "shutting down"})
		return
	}
	if err := a.St.Ping(ctx); err != nil {
		respond.JSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "reason": "store unavailable"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}` + "\n"))
}
