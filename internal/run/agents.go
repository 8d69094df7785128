package run

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// agentRowTTL bounds how long an agent's row is used without reading it
// again. Changes do not wait for it: registering or deleting an agent goes
// through WriteAgents, which forgets the rows here after the commit and
// tells the other processes in the write's transaction
// (store.NotifyAgentsChanged; a listener reconnect forgets everything). It
// only bounds a change missed while notifications were not arriving.
// Heartbeats and probes write an agent's health, which starting a run does
// not read, so they do not forget.
const agentRowTTL = 2 * time.Second

// Agent returns an agent's row, kept for a moment (m.agents): a run's start
// — and an A2A call, a call_<agent> tool — reads it each time, and the
// statement, a round trip on PostgreSQL, was a fifth of a run's start.
// An absent agent wraps store.ErrNotFound.
//
// An absent agent is not taken from the cache: an agent registered on
// another replica a moment ago, whose word has not arrived yet, is read.
func (m *Manager) Agent(ctx context.Context, agentID string) (*store.Agent, error) {
	ag, err := m.agents.Get(ctx, agentID, m.st.AgentGet)
	if errors.Is(err, store.ErrNotFound) {
		return m.AgentFresh(ctx, agentID)
	}
	return ag, err
}

// AgentFresh reads an agent's row from the store (and keeps it): for a
// caller about to refuse a request on the kept row's word.
func (m *Manager) AgentFresh(ctx context.Context, agentID string) (*store.Agent, error) {
	return m.agents.Refresh(ctx, agentID, m.st.AgentGet)
}

// WriteAgents runs fn, which registers, changes or deletes agents, in one
// transaction that also tells the processes sharing the store (sent when
// it commits, on PostgreSQL), then forgets the agents' rows kept here:
// after the commit, so a run started from then on reads the change.
func (m *Manager) WriteAgents(ctx context.Context, fn func(tx store.Queries) error) error {
	err := m.st.InTx(ctx, func(tx store.Queries) error {
		if err := fn(tx); err != nil {
			return err
		}
		return tx.EventsNotify(ctx, m.log.Origin(), []string{store.NotifyAgentsChanged})
	})
	m.agents.Forget()
	return err
}

// heardAgentsChanged is the remote half: another process wrote an agent,
// or notifications may have been missed (nil).
func (m *Manager) heardAgentsChanged(sessionIDs []string) {
	if sessionIDs == nil || slices.Contains(sessionIDs, store.NotifyAgentsChanged) {
		m.agents.Forget()
	}
}
