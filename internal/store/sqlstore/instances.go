package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const instanceCols = `instance_id, heartbeat_at, process`

func scanInstance(row interface{ Scan(...any) error }) (*store.Instance, error) {
	var i store.Instance
	if err := row.Scan(&i.InstanceID, &i.HeartbeatAt, &i.Process); err != nil {
		return nil, err
	}
	return &i, nil
}

// InstanceHeartbeat records that a process is alive.
func (q *queries) InstanceHeartbeat(ctx context.Context, instanceID string, at int64) error {
	_, err := q.exec(ctx, `INSERT INTO instances (instance_id, heartbeat_at) VALUES (?, ?)
		ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, instanceID, at)
	if err != nil {
		return fmt.Errorf("instance heartbeat %s: %w", instanceID, err)
	}
	return nil
}

// InstanceGet reads one instance.
func (q *queries) InstanceGet(ctx context.Context, instanceID string) (*store.Instance, error) {
	i, err := scanInstance(q.queryRow(ctx, false, `SELECT `+instanceCols+` FROM instances WHERE instance_id = ?`, instanceID))
	if err != nil {
		return nil, fmt.Errorf("get instance %s: %w", instanceID, err)
	}
	return i, nil
}

// InstanceClaim is one guarded upsert: the DO UPDATE's WHERE is the guard,
// so of two processes claiming one id at once only one gets it.
func (q *queries) InstanceClaim(ctx context.Context, p *store.InstanceClaimParams) (*store.Instance, error) {
	if p.Process == "" {
		return nil, fmt.Errorf("claim instance %s: empty process", p.InstanceID)
	}
	query := `INSERT INTO instances (` + instanceCols + `) VALUES (?, ?, ?)
		ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, process = excluded.process
		WHERE instances.process = excluded.process OR instances.heartbeat_at < ?`
	args := []any{p.InstanceID, p.At, p.Process, p.AliveSince}
	if p.TakeOver != nil {
		query += ` OR (instances.process = ? AND instances.heartbeat_at = ?)`
		args = append(args, p.TakeOver.Process, p.TakeOver.HeartbeatAt)
	}
	i, err := scanInstance(q.queryRow(ctx, true, query+` RETURNING `+instanceCols, args...))
	if err == nil {
		return i, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("claim instance %s: %w", p.InstanceID, err)
	}
	cur, err := scanInstance(q.queryRow(ctx, true, `SELECT `+instanceCols+` FROM instances WHERE instance_id = ?`, p.InstanceID))
	if err != nil {
		return nil, fmt.Errorf("claim instance %s: %w", p.InstanceID, err)
	}
	return cur, fmt.Errorf("instance %s is held by process %s (heartbeat at %d): %w", p.InstanceID, cur.Process, cur.HeartbeatAt, store.ErrConflict)
}

// InstanceRelease deletes the instance's row if process holds it.
func (q *queries) InstanceRelease(ctx context.Context, instanceID, process string) error {
	if _, err := q.exec(ctx, `DELETE FROM instances WHERE instance_id = ? AND process = ?`, instanceID, process); err != nil {
		return fmt.Errorf("release instance %s: %w", instanceID, err)
	}
	return nil
}

// InstanceList lists known processes with their last heartbeat.
func (q *queries) InstanceList(ctx context.Context) ([]store.Instance, error) {
	rows, err := q.query(ctx, `SELECT `+instanceCols+` FROM instances ORDER BY instance_id`)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []store.Instance
	for rows.Next() {
		i, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		out = append(out, *i)
	}
	return out, rows.Err()
}
