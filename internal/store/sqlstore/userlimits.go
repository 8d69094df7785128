package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// lockUser serialises admissions of one user across replicas: its row in
// user_locks, created on first use and locked until the transaction ends
// (SQLite's single writer serialises already).
func (q *queries) lockUser(ctx context.Context, userID string) error {
	if _, err := q.exec(ctx, `INSERT INTO user_locks (user_id) VALUES (?) ON CONFLICT (user_id) DO NOTHING`, userID); err != nil {
		return fmt.Errorf("lock user %s: %w", userID, err)
	}
	if q.d.Name != "postgres" {
		return nil
	}
	var id string
	if err := q.queryRow(ctx, true, `SELECT user_id FROM user_locks WHERE user_id = ? FOR UPDATE`, userID).Scan(&id); err != nil {
		return fmt.Errorf("lock user %s: %w", userID, mapErr(q.d, err))
	}
	return nil
}

// UserConnectionAdmit outside a caller's transaction runs in one: the
// count and the increment must happen under the user's lock.
func (db *DB) UserConnectionAdmit(ctx context.Context, p *store.UserConnectionAdmitParams) (ok bool, n int, err error) {
	err = db.InTx(ctx, func(tx store.Queries) error {
		ok, n, err = tx.UserConnectionAdmit(ctx, p)
		return err
	})
	return ok, n, err
}

// UserConnectionLeave outside a caller's transaction runs in one.
func (db *DB) UserConnectionLeave(ctx context.Context, userID, instanceID string) error {
	return db.InTx(ctx, func(tx store.Queries) error { return tx.UserConnectionLeave(ctx, userID, instanceID) })
}

// UserConnectionAdmit counts a connection under the user's lock, so two
// replicas admitting at once cannot both take the last place. A row of
// this process counts whatever its heartbeat says (it is alive: it is
// asking).
func (q *queries) UserConnectionAdmit(ctx context.Context, p *store.UserConnectionAdmitParams) (bool, int, error) {
	if err := q.lockUser(ctx, p.UserID); err != nil {
		return false, 0, err
	}
	var n int64
	err := q.queryRow(ctx, true, `SELECT COALESCE(SUM(c.connections), 0) FROM user_connections c JOIN instances i ON i.instance_id = c.instance_id
		WHERE c.user_id = ? AND (i.heartbeat_at >= ? OR c.instance_id = ?)`, p.UserID, p.AliveSince, p.InstanceID).Scan(&n)
	if err != nil {
		return false, 0, fmt.Errorf("count connections of %s: %w", p.UserID, mapErr(q.d, err))
	}
	if p.Max > 0 && int(n) >= p.Max {
		return false, int(n), nil
	}
	if _, err := q.exec(ctx, `INSERT INTO user_connections (user_id, instance_id, connections, updated_at) VALUES (?, ?, 1, ?)
		ON CONFLICT (user_id, instance_id) DO UPDATE SET connections = user_connections.connections + 1, updated_at = excluded.updated_at`,
		p.UserID, p.InstanceID, p.At); err != nil {
		return false, 0, fmt.Errorf("count connection of %s: %w", p.UserID, err)
	}
	return true, int(n) + 1, nil
}

// UserConnectionLeave uncounts one connection; the row goes at zero.
func (q *queries) UserConnectionLeave(ctx context.Context, userID, instanceID string) error {
	if _, err := q.exec(ctx, `UPDATE user_connections SET connections = connections - 1 WHERE user_id = ? AND instance_id = ?`, userID, instanceID); err != nil {
		return fmt.Errorf("uncount connection of %s: %w", userID, err)
	}
	if _, err := q.exec(ctx, `DELETE FROM user_connections WHERE user_id = ? AND instance_id = ? AND connections <= 0`, userID, instanceID); err != nil {
		return fmt.Errorf("uncount connection of %s: %w", userID, err)
	}
	return nil
}

// UserConnectionsDeleteInstance forgets every connection of a process.
func (q *queries) UserConnectionsDeleteInstance(ctx context.Context, instanceID string) error {
	if _, err := q.exec(ctx, `DELETE FROM user_connections WHERE instance_id = ?`, instanceID); err != nil {
		return fmt.Errorf("drop connections of %s: %w", instanceID, err)
	}
	return nil
}
