package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const userKeyCols = `key_id, user_id, key_hash, created_at`

func scanUserKey(row interface{ Scan(...any) error }) (*store.UserKey, error) {
	var k store.UserKey
	if err := row.Scan(&k.KeyID, &k.UserID, &k.KeyHash, &k.CreatedAt); err != nil {
		return nil, err
	}
	return &k, nil
}

// UserKeyInsert stores a new user key (its hash).
func (q *queries) UserKeyInsert(ctx context.Context, k *store.UserKey) error {
	if _, err := q.exec(ctx, `INSERT INTO user_keys (`+userKeyCols+`) VALUES (?, ?, ?, ?)`, k.KeyID, k.UserID, k.KeyHash, k.CreatedAt); err != nil {
		return fmt.Errorf("insert key of user %s: %w", k.UserID, err)
	}
	return nil
}

// UserKeyList lists a user's keys, oldest first.
func (q *queries) UserKeyList(ctx context.Context, userID string) ([]*store.UserKey, error) {
	rows, err := q.query(ctx, `SELECT `+userKeyCols+` FROM user_keys WHERE user_id = ? ORDER BY created_at, key_id`, userID)
	if err != nil {
		return nil, fmt.Errorf("list keys of user %s: %w", userID, err)
	}
	defer rows.Close()
	out := []*store.UserKey{}
	for rows.Next() {
		k, err := scanUserKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys of user %s: %w", userID, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// UserKeyDelete revokes a key.
func (q *queries) UserKeyDelete(ctx context.Context, userID, keyID string) (*store.UserKey, error) {
	k, err := scanUserKey(q.queryRow(ctx, true, `DELETE FROM user_keys WHERE user_id = ? AND key_id = ? RETURNING `+userKeyCols, userID, keyID))
	if err != nil {
		return nil, fmt.Errorf("delete key %s of user %s: %w", keyID, userID, mapErr(q.d, err))
	}
	return k, nil
}

// UserKeyGetByHash finds the user key with that hash.
func (q *queries) UserKeyGetByHash(ctx context.Context, keyHash string) (*store.UserKey, error) {
	k, err := scanUserKey(q.queryRow(ctx, false, `SELECT `+userKeyCols+` FROM user_keys WHERE key_hash = ?`, keyHash))
	if err != nil {
		return nil, fmt.Errorf("get user key: %w", mapErr(q.d, err))
	}
	return k, nil
}

// AgentKeyGraceSet records a rotated key's grace period and drops the
// agent's expired ones.
func (q *queries) AgentKeyGraceSet(ctx context.Context, p *store.AgentKeyGraceParams) error {
	if _, err := q.exec(ctx, `DELETE FROM agent_key_grace WHERE agent_id = ? AND expires_at <= ?`, p.AgentID, p.At); err != nil {
		return fmt.Errorf("agent %s key grace: %w", p.AgentID, err)
	}
	if _, err := q.exec(ctx, `INSERT INTO agent_key_grace (key_hash, agent_id, expires_at, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (key_hash) DO UPDATE SET agent_id = excluded.agent_id, expires_at = excluded.expires_at`,
		p.KeyHash, p.AgentID, p.ExpiresAt, p.At); err != nil {
		return fmt.Errorf("agent %s key grace: %w", p.AgentID, err)
	}
	return nil
}

// AgentKeyGraceGet finds the agent a key still in its grace period
// belongs to.
func (q *queries) AgentKeyGraceGet(ctx context.Context, keyHash string, now int64) (string, int64, error) {
	var agentID string
	var expires int64
	err := q.queryRow(ctx, false, `SELECT agent_id, expires_at FROM agent_key_grace WHERE key_hash = ? AND expires_at > ?`, keyHash, now).Scan(&agentID, &expires)
	if err != nil {
		return "", 0, fmt.Errorf("agent key grace: %w", mapErr(q.d, err))
	}
	return agentID, expires, nil
}

// AgentKeyGraceDelete forgets every grace key of an agent.
func (q *queries) AgentKeyGraceDelete(ctx context.Context, agentID string) error {
	if _, err := q.exec(ctx, `DELETE FROM agent_key_grace WHERE agent_id = ?`, agentID); err != nil {
		return fmt.Errorf("agent %s key grace: %w", agentID, err)
	}
	return nil
}
