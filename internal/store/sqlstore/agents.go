package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const agentCols = `agent_id, name, description, endpoint, capabilities, linked_agents, sub_agent_echo, key_hash, status, last_heartbeat_at, last_probe_at, created_at, updated_at,
	a2a, protocol, a2a_card`

func scanAgent(row interface{ Scan(...any) error }) (*store.Agent, error) {
	var a store.Agent
	var a2a int
	err := row.Scan(&a.AgentID, &a.Name, &a.Description, &a.Endpoint, nullJSON{&a.Capabilities}, nullJSON{&a.LinkedAgents}, &a.SubAgentEcho, &a.KeyHash,
		&a.Status, &a.LastHeartbeatAt, &a.LastProbeAt, &a.CreatedAt, &a.UpdatedAt, &a2a, &a.Protocol, nullJSON{&a.A2ACard})
	if err != nil {
		return nil, err
	}
	a.A2A = a2a == 1
	return &a, nil
}

// AgentUpsert registers an agent or updates it; an empty KeyHash keeps the
// stored key (re-registration without rotation).
func (q *queries) AgentUpsert(ctx context.Context, p *store.AgentUpsertParams) (*store.Agent, error) {
	echo := p.SubAgentEcho
	if echo == "" {
		echo = store.EchoAggregate
	}
	protocol := p.Protocol
	if protocol == "" {
		protocol = store.ProtocolAgentplane
	}
	a2a := 0
	if p.A2A {
		a2a = 1
	}
	a, err := scanAgent(q.queryRow(ctx, true, `INSERT INTO agents (agent_id, name, description, endpoint, capabilities, linked_agents, sub_agent_echo, key_hash, status, created_at, updated_at,
			a2a, protocol, a2a_card)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'unknown', ?, ?, ?, ?, ?)
		ON CONFLICT (agent_id) DO UPDATE SET name = excluded.name, description = excluded.description, endpoint = excluded.endpoint,
			capabilities = excluded.capabilities, linked_agents = excluded.linked_agents, sub_agent_echo = excluded.sub_agent_echo,
			key_hash = CASE WHEN excluded.key_hash = '' THEN agents.key_hash ELSE excluded.key_hash END,
			updated_at = excluded.updated_at, a2a = excluded.a2a, protocol = excluded.protocol, a2a_card = excluded.a2a_card
		RETURNING `+agentCols,
		p.AgentID, p.Name, p.Description, p.Endpoint, jsonArg(p.Capabilities, "[]"), jsonArg(p.LinkedAgents, "[]"), echo, p.KeyHash, p.At, p.At,
		a2a, protocol, jsonArg(p.A2ACard, "")))
	if err != nil {
		return nil, fmt.Errorf("upsert agent %s: %w", p.AgentID, mapErr(q.d, err))
	}
	return a, nil
}

// AgentGet reads an agent.
func (q *queries) AgentGet(ctx context.Context, agentID string) (*store.Agent, error) {
	a, err := scanAgent(q.queryRow(ctx, false, `SELECT `+agentCols+` FROM agents WHERE agent_id = ?`, agentID))
	if err != nil {
		return nil, fmt.Errorf("get agent %s: %w", agentID, mapErr(q.d, err))
	}
	return a, nil
}

// AgentGetByKeyHash finds the agent owning an API key.
func (q *queries) AgentGetByKeyHash(ctx context.Context, keyHash string) (*store.Agent, error) {
	if keyHash == "" {
		return nil, fmt.Errorf("get agent by key: %w", store.ErrNotFound)
	}
	a, err := scanAgent(q.queryRow(ctx, false, `SELECT `+agentCols+` FROM agents WHERE key_hash = ?`, keyHash))
	if err != nil {
		return nil, fmt.Errorf("get agent by key: %w", mapErr(q.d, err))
	}
	return a, nil
}

// AgentList lists agents by id.
func (q *queries) AgentList(ctx context.Context) ([]*store.Agent, error) {
	rows, err := q.query(ctx, `SELECT `+agentCols+` FROM agents ORDER BY agent_id`)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	defer rows.Close()
	out := []*store.Agent{}
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, fmt.Errorf("list agents: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// AgentDelete removes an agent; ErrNotFound when absent.
func (q *queries) AgentDelete(ctx context.Context, agentID string) error {
	res, err := q.exec(ctx, `DELETE FROM agents WHERE agent_id = ?`, agentID)
	if err != nil {
		return fmt.Errorf("delete agent %s: %w", agentID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete agent %s: %w", agentID, store.ErrNotFound)
	}
	return nil
}

// AgentHeartbeat records a heartbeat; an agent that beats is healthy.
func (q *queries) AgentHeartbeat(ctx context.Context, agentID string, at int64) (*store.Agent, error) {
	a, err := scanAgent(q.queryRow(ctx, true, `UPDATE agents SET last_heartbeat_at = ?, status = 'healthy' WHERE agent_id = ? RETURNING `+agentCols, at, agentID))
	if err != nil {
		return nil, fmt.Errorf("heartbeat agent %s: %w", agentID, mapErr(q.d, err))
	}
	return a, nil
}

// AgentSetStatus records a health probe's verdict.
func (q *queries) AgentSetStatus(ctx context.Context, agentID, status string, at int64) error {
	res, err := q.exec(ctx, `UPDATE agents SET status = ?, last_probe_at = ? WHERE agent_id = ?`, status, at, agentID)
	if err != nil {
		return fmt.Errorf("set agent %s status: %w", agentID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set agent %s status: %w", agentID, store.ErrNotFound)
	}
	return nil
}
