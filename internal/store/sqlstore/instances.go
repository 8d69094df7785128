package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// InstanceHeartbeat records that a process is alive.
func (q *queries) InstanceHeartbeat(ctx context.Context, instanceID string, at int64) error {
	_, err := q.exec(ctx, `INSERT INTO instances (instance_id, heartbeat_at) VALUES (?, ?)
		ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, instanceID, at)
	if err != nil {
		return fmt.Errorf("instance heartbeat %s: %w", instanceID, err)
	}
	return nil
}

// InstanceList lists known processes with their last heartbeat.
func (q *queries) InstanceList(ctx context.Context) ([]store.Instance, error) {
	rows, err := q.query(ctx, `SELECT instance_id, heartbeat_at FROM instances ORDER BY instance_id`)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []store.Instance
	for rows.Next() {
		var i store.Instance
		if err := rows.Scan(&i.InstanceID, &i.HeartbeatAt); err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		out = append(out, i)
	}
	return out, rows.Err()
}
