package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// ContextPut writes the next version of a context entry in one statement:
// the version is computed from the current maximum and the primary key on
// (owner, key, version) turns a concurrent writer into ErrConflict. With
// IfVersion the HAVING clause makes it a compare-and-set.
func (q *queries) ContextPut(ctx context.Context, p *store.ContextPutParams) (*store.ContextBlob, error) {
	query := `INSERT INTO context_blobs (owner_id, key, version, data, created_at)
		SELECT ?, ?, COALESCE(MAX(version), 0) + 1, ?, ? FROM context_blobs WHERE owner_id = ? AND key = ?`
	args := []any{p.OwnerID, p.Key, jsonArg(p.Data, "null"), p.At, p.OwnerID, p.Key}
	if p.IfVersion != nil {
		query += ` HAVING COALESCE(MAX(version), 0) = ?`
		args = append(args, *p.IfVersion)
	}
	query += ` RETURNING version`
	b := &store.ContextBlob{OwnerID: p.OwnerID, Key: p.Key, Data: p.Data, CreatedAt: p.At}
	err := q.queryRow(ctx, true, query, args...).Scan(&b.Version)
	if err = mapErr(q.d, err); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("put context %s: version is not %d: %w", p.Key, *p.IfVersion, store.ErrConflict)
		}
		return nil, fmt.Errorf("put context %s: %w", p.Key, err)
	}
	return b, nil
}

// ContextGet reads one version (0 = the latest).
func (q *queries) ContextGet(ctx context.Context, ownerID, key string, version int64) (*store.ContextBlob, error) {
	query := `SELECT version, data, created_at FROM context_blobs WHERE owner_id = ? AND key = ?`
	args := []any{ownerID, key}
	if version > 0 {
		query += ` AND version = ?`
		args = append(args, version)
	}
	query += ` ORDER BY version DESC LIMIT 1`
	b := &store.ContextBlob{OwnerID: ownerID, Key: key}
	if err := q.queryRow(ctx, false, query, args...).Scan(&b.Version, nullJSON{&b.Data}, &b.CreatedAt); err != nil {
		return nil, fmt.Errorf("get context %s: %w", key, mapErr(q.d, err))
	}
	return b, nil
}
