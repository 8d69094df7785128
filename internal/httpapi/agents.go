package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)

// RegisterRequest is the body of POST /v1/agents/register.
type RegisterRequest struct {
	AgentID      string   `json:"agent_id"`
	Name         string   `json:"name"`
	Description  string   `json:"description"`
	Endpoint     string   `json:"endpoint"`
	Capabilities []string `json:"capabilities"`
	LinkedAgents []string `json:"linked_agents"`
	// SubAgentEcho is how the agent's deltas reach the session's clients
	// when it runs as a child: aggregate (default), passthrough or off.
	SubAgentEcho string `json:"sub_agent_echo"`
	RotateKey    bool   `json:"rotate_key"`
	// A2A serves the agent over A2A at /a2a/{agent_id} (DESIGN §12).
	A2A bool `json:"a2a"`
	// Protocol is how the platform speaks to the agent: "agentplane"
	// (default, DESIGN §5) or "a2a" — a remote A2A agent whose endpoint is
	// its card URL or base URL; the card is fetched and stored.
	Protocol string `json:"protocol"`
}

// MaxAgentDescription bounds an agent's description, in bytes: it is sent
// to models with the call_<agent> tool (DESIGN §11).
const MaxAgentDescription = 4096

// RegisterResponse answers a registration. AgentAPIKey is set only when a
// key was issued (first registration or rotate_key).
type RegisterResponse struct {
	OK          bool         `json:"ok"`
	AgentID     string       `json:"agent_id"`
	AgentAPIKey string       `json:"agent_api_key,omitempty"`
	Created     bool         `json:"created"`
	Agent       *store.Agent `json:"agent"`
}

func (a *API) agentRegister(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	var req RegisterRequest
	// Unknown fields are refused, as for tools: a misspelt "linked_agent"
	// must not silently register an agent without its links.
	if err := respond.DecodeJSONStrict(w, r, maxBody, &req); err != nil {
		respond.Err(w, r, err)
		return
	}
	resp, err := a.Register(a.auditCtx(r), &req)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	status := http.StatusOK
	if resp.Created {
		status = http.StatusCreated
	}
	respond.JSON(w, status, resp)
}

// Register validates and stores an agent; the config file and --demo use it
// too, so every registration passes the same checks.
func (a *API) Register(ctx context.Context, req *RegisterRequest) (*RegisterResponse, error) {
	if !agentIDPattern.MatchString(req.AgentID) {
		return nil, respond.E(http.StatusBadRequest, "invalid_agent_id", "agent_id must be 1-64 letters, digits, '_', '-', '.'")
	}
	if err := tool.CheckAgentID(req.AgentID); err != nil {
		// Another agent calls it as the tool call_<agent_id>: a name that
		// could not be offered or called would leave it direct-form only.
		// An agent registered before such ids were refused may still be
		// updated (its key rotated, its config-file entry applied at start).
		if _, gerr := a.St.AgentGet(ctx, req.AgentID); gerr != nil {
			return nil, respond.E(http.StatusBadRequest, "invalid_agent_id", "agent_id must not contain \"__\", \"_.\" or \"--\", and call_<agent_id> must fit an OpenAI function name (64 characters, each '.' counting two)")
		}
	}
	u, err := a.Allow.ValidateEndpoint(ctx, req.Endpoint)
	if err != nil {
		var ee *agent.EndpointError
		if errors.As(err, &ee) {
			return nil, respond.E(http.StatusBadRequest, ee.Code, ee.Message)
		}
		return nil, err
	}
	for _, l := range req.LinkedAgents {
		if !agentIDPattern.MatchString(l) {
			return nil, respond.E(http.StatusBadRequest, "invalid_linked_agents", "linked_agents must be agent ids")
		}
	}
	if len(req.Description) > MaxAgentDescription || !utf8.ValidString(req.Description) {
		return nil, respond.E(http.StatusBadRequest, "invalid_description", fmt.Sprintf("description must be valid UTF-8 of at most %d bytes", MaxAgentDescription))
	}
	switch req.SubAgentEcho {
	case "", store.EchoAggregate, store.EchoPassthrough, store.EchoOff:
	default:
		return nil, respond.E(http.StatusBadRequest, "invalid_sub_agent_echo", `sub_agent_echo must be "aggregate", "passthrough" or "off"`)
	}
	var card json.RawMessage
	switch req.Protocol {
	case "", store.ProtocolAgentplane:
		req.Protocol = store.ProtocolAgentplane
	case store.ProtocolA2A:
		if a.FetchCard == nil {
			return nil, respond.E(http.StatusBadRequest, "invalid_protocol", "A2A agents are not supported by this server")
		}
		// The card is fetched through the SSRF-checked client, and every
		// URL it lists must pass the same rules.
		if card, err = a.FetchCard(ctx, req.Endpoint); err != nil {
			return nil, err
		}
	default:
		return nil, respond.E(http.StatusBadRequest, "invalid_protocol", `protocol must be "agentplane" or "a2a"`)
	}
	if req.Name == "" {
		req.Name = req.AgentID
	}
	caps, _ := json.Marshal(nonNil(req.Capabilities))
	linked, _ := json.Marshal(nonNil(req.LinkedAgents))
	endpoint := strings.TrimRight(u.String(), "/")
	var key, hash string
	var ag *store.Agent
	var created bool
	// The change and its audit row commit together (DESIGN §15); the run
	// manager forgets the agent rows it keeps.
	err = a.Runs.WriteAgents(ctx, func(tx store.Queries) error {
		prev, err := tx.AgentGet(ctx, req.AgentID)
		created = errors.Is(err, store.ErrNotFound)
		if err != nil && !created {
			return err
		}
		key, hash = "", ""
		if created || req.RotateKey {
			key = ids.Secret("apk_")
			hash = auth.HashKey(key)
		}
		now := time.Now().UnixMilli()
		grace := a.AgentKeyGrace
		if !created && req.RotateKey && grace > 0 {
			// The previous key keeps working for the grace period, so a
			// fleet of agent processes can be rolled onto the new one.
			if err := tx.AgentKeyGraceSet(ctx, &store.AgentKeyGraceParams{KeyHash: prev.KeyHash, AgentID: prev.AgentID, ExpiresAt: now + grace.Milliseconds(), At: now}); err != nil {
				return err
			}
		}
		if ag, err = tx.AgentUpsert(ctx, &store.AgentUpsertParams{
			AgentID: req.AgentID, Name: req.Name, Description: req.Description, Endpoint: endpoint,
			Capabilities: caps, LinkedAgents: linked, SubAgentEcho: req.SubAgentEcho, KeyHash: hash, At: now,
			A2A: req.A2A, Protocol: req.Protocol, A2ACard: card,
		}); err != nil {
			return err
		}
		action := audit.AgentRegister
		switch {
		case created:
		case req.RotateKey:
			action = audit.AgentRotateKey
		default:
			action = audit.AgentUpdate
			if audit.ActorFrom(ctx) == audit.Config && prev.Name == ag.Name && prev.Endpoint == ag.Endpoint && prev.Description == ag.Description &&
				prev.SubAgentEcho == ag.SubAgentEcho && string(prev.Capabilities) == string(ag.Capabilities) && string(prev.LinkedAgents) == string(ag.LinkedAgents) &&
				prev.A2A == ag.A2A && prev.Protocol == ag.Protocol {
				return nil // the config file applied again at a start: nothing changed
			}
		}
		detail := map[string]any{"name": ag.Name, "endpoint": ag.Endpoint, "linked_agents": json.RawMessage(ag.LinkedAgents), "a2a": ag.A2A, "protocol": ag.Protocol}
		if action == audit.AgentRotateKey {
			detail["old_key_grace_seconds"] = int64(grace.Seconds())
		}
		return audit.Write(ctx, tx, action, ag.AgentID, detail)
	})
	if err != nil {
		return nil, err
	}
	if req.RotateKey {
		a.Keys.Forget(ag.AgentID)
	}
	return &RegisterResponse{OK: true, AgentID: ag.AgentID, AgentAPIKey: key, Created: created, Agent: ag}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// agentList is open to every key: clients pick an agent from it; nothing
// secret is in an agent row. Paged by agent id (limit, cursor →
// next_cursor).
func (a *API) agentList(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.principal(w, r); !ok {
		return
	}
	limit, err := limitParam(r, 1000, 1000)
	var c *cursor
	if err == nil {
		c, err = decodeCursor(r, "agents")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	after := ""
	if c != nil {
		after = c.ID
	}
	list, err := a.St.AgentListPage(r.Context(), after, limit+1)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = encodeCursor("agents", 0, list[limit-1].AgentID)
	}
	respond.JSON(w, http.StatusOK, map[string]any{"agents": list, "next_cursor": next})
}

func (a *API) agentGet(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.principal(w, r); !ok {
		return
	}
	ag, err := a.St.AgentGet(r.Context(), r.PathValue("agent_id"))
	if errors.Is(err, store.ErrNotFound) {
		err = respond.E(http.StatusNotFound, "agent_not_found", "no such agent")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, ag)
}

func (a *API) agentDelete(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	id := r.PathValue("agent_id")
	ctx := a.auditCtx(r)
	err := a.Runs.WriteAgents(ctx, func(tx store.Queries) error {
		if err := tx.AgentDelete(ctx, id); err != nil {
			return err
		}
		if err := tx.AgentKeyGraceDelete(ctx, id); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.AgentDelete, id, nil)
	})
	if errors.Is(err, store.ErrNotFound) {
		err = respond.E(http.StatusNotFound, "agent_not_found", "no such agent")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	a.Keys.Forget(id)
	respond.JSON(w, http.StatusOK, map[string]any{"ok": true, "agent_id": id})
}

// agentVerb serves POST /v1/agents/{agent_id}:heartbeat and
// POST /v1/agents/{agent_id}:invoke (an agent calling another, invoke.go).
func (a *API) agentVerb(w http.ResponseWriter, r *http.Request) {
	id, verb, ok := splitVerb(r.PathValue("verb"))
	if ok && verb == "invoke" {
		a.agentInvoke(w, r, id)
		return
	}
	if !ok || verb != "heartbeat" {
		respond.Err(w, r, respond.E(http.StatusNotFound, "not_found", "unknown agent operation"))
		return
	}
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	if p.Kind != auth.Admin && !(p.Kind == auth.Agent && p.AgentID == id) {
		respond.Err(w, r, errForbidden)
		return
	}
	ag, err := a.St.AgentHeartbeat(r.Context(), id, time.Now().UnixMilli())
	if errors.Is(err, store.ErrNotFound) {
		err = respond.E(http.StatusNotFound, "agent_not_found", "no such agent")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, map[string]any{"ok": true, "agent_id": id, "status": ag.Status})
}
