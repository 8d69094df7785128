// Package audit records administrative actions in the append-only audit
// log (DESIGN §15): who did what to which object, written in the
// transaction of the change itself wherever the store allows, so a change
// without its row (or a row without its change) cannot be committed.
//
// The actor travels in the request's context (WithActor, set by the HTTP
// handlers from the caller's key), so services deep below the handlers —
// the tool registry, the MCP server registry — record their changes
// without every signature growing an actor parameter.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
)

// Actors that are not keys.
const (
	// Config is the config file, applied at start.
	Config = "config"
	// Retention is the retention sweeper.
	Retention = "retention"
	// Admin is the admin key.
	Admin = "admin"
)

// User is the actor of a user key, "user:<id>".
func User(id string) string { return "user:" + id }

// Agent is the actor of an agent key, "agent:<id>".
func Agent(id string) string { return "agent:" + id }

// Actions. Names are resource.verb; new ones are added here so the list in
// docs/API.md has one source.
const (
	AgentRegister  = "agent.register"   // a new agent
	AgentUpdate    = "agent.update"     // re-registration without a new key
	AgentRotateKey = "agent.rotate_key" // re-registration with rotate_key
	AgentDelete    = "agent.delete"
	ToolPut        = "tool.put"
	ToolDelete     = "tool.delete"
	MCPServerPut   = "mcp_server.put"
	MCPServerDel   = "mcp_server.delete"
	ApprovalDecide = "approval.decide"
	SessionDelete  = "session.delete" // DELETE /v1/sessions/{id}
	SessionPurge   = "session.purge"  // the retention sweeper
	EventsPrune    = "events.prune"   // the retention sweeper, an agent's run-less events
	UserKeyCreate  = "user_key.create"
	UserKeyDelete  = "user_key.delete"
	RunCancel      = "run.cancel"       // an operator's cancel (POST /v1/runs/{id}:cancel, a forced session delete)
	ToolCallCancel = "tool_call.cancel" // an operator's cancel (POST /v1/tool_calls/{id}:cancel)
)

type actorKey struct{}

// WithActor returns ctx carrying who acts.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor ctx carries, or "" when none.
func ActorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// Write appends one audit row through q (a transaction, to commit with the
// change it records). The actor is ctx's; a change made with no actor in
// its context is a programming error, recorded as "unknown" rather than
// lost. detail is marshalled to JSON (nil: {}).
func Write(ctx context.Context, q store.Queries, action, target string, detail any) error {
	actor := ActorFrom(ctx)
	if actor == "" {
		actor = "unknown"
	}
	return WriteAs(ctx, q, actor, action, target, detail)
}

// WriteAs is Write with an explicit actor.
func WriteAs(ctx context.Context, q store.Queries, actor, action, target string, detail any) error {
	var raw json.RawMessage
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return fmt.Errorf("audit %s: %w", action, err)
		}
		raw = b
	}
	_, err := q.AuditInsert(ctx, &store.AuditInsertParams{
		AuditID: ids.New("aud"), Actor: actor, Action: action, Target: target, TS: time.Now().UnixMilli(), Detail: raw,
	})
	return err
}
