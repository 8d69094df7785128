package server

import (
	"context"
	"time"

	"github.com/agentplane/agentplane/internal/ingress"
	"github.com/agentplane/agentplane/internal/store"
)

// staleAfter is how long a process counts as alive after its last
// heartbeat: its runs are orphans (run.Options.StaleAfter) and its client
// connections stop counting (clientPresence) at the same moment.
const staleAfter = 30 * time.Second

// clientPresence is the tool service's presence check (DESIGN §8: a client
// tool needs a connection of its session). A connection to this process
// answers at once. Otherwise, when replicas share the database
// (PostgreSQL), a connection to any live process does, read from the
// presence rows their ingresses write (recordPresence) in the
// transaction that dispatches the call. A process started with
// --role orchestrator has no connections, so only the store answers there.
func clientPresence(ws *ingress.Server, shared bool) func(ctx context.Context, q store.Queries, sessionID string) (bool, error) {
	return func(ctx context.Context, q store.Queries, sessionID string) (bool, error) {
		if ws.Connected(sessionID) {
			return true, nil
		}
		if !shared {
			return false, nil
		}
		return q.SessionHasClient(ctx, sessionID, time.Now().Add(-staleAfter).UnixMilli())
	}
}

// recordPresence is the ingress's write-through (ingress.Options.Presence):
// this process's connections of a session, as one row per session.
func recordPresence(st store.Store, instanceID string) func(ctx context.Context, sessionID string, connections int) error {
	return func(ctx context.Context, sessionID string, connections int) error {
		return st.SessionClientsSet(ctx, sessionID, instanceID, connections, time.Now().UnixMilli())
	}
}
