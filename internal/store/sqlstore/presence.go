package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// SessionClientsSet records instanceID's connection count for sessionID; 0
// deletes the row, so the table only holds sessions with clients.
func (q *queries) SessionClientsSet(ctx context.Context, sessionID, instanceID string, connections int, at int64) error {
	var err error
	if connections <= 0 {
		_, err = q.exec(ctx, `DELETE FROM session_clients WHERE session_id = ? AND instance_id = ?`, sessionID, instanceID)
	} else {
		_, err = q.exec(ctx, `INSERT INTO session_clients (session_id, instance_id, connections, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (session_id, instance_id) DO UPDATE SET connections = excluded.connections, updated_at = excluded.updated_at`,
			sessionID, instanceID, connections, at)
	}
	if err != nil {
		return fmt.Errorf("session %s clients of %s: %w", sessionID, instanceID, err)
	}
	return nil
}

// SessionClientsDeleteInstance drops every presence row of instanceID.
func (q *queries) SessionClientsDeleteInstance(ctx context.Context, instanceID string) error {
	if _, err := q.exec(ctx, `DELETE FROM session_clients WHERE instance_id = ?`, instanceID); err != nil {
		return fmt.Errorf("drop session clients of %s: %w", instanceID, err)
	}
	return nil
}

// SessionHasClient reports whether a live process (heartbeat at or after
// aliveSince) has connections following sessionID.
func (q *queries) SessionHasClient(ctx context.Context, sessionID string, aliveSince int64) (bool, error) {
	var one int
	err := q.queryRow(ctx, false, `SELECT 1 FROM session_clients c JOIN instances i ON i.instance_id = c.instance_id
		WHERE c.session_id = ? AND c.connections > 0 AND i.heartbeat_at >= ? LIMIT 1`, sessionID, aliveSince).Scan(&one)
	switch err = mapErr(q.d, err); {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("session %s clients: %w", sessionID, err)
}
