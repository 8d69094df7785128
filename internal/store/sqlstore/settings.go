package sqlstore

import (
	"context"
	"fmt"
)

// SettingGet reads one setting.
func (q *queries) SettingGet(ctx context.Context, name string) (string, error) {
	var v string
	if err := q.queryRow(ctx, false, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v); err != nil {
		return "", fmt.Errorf("setting %s: %w", name, mapErr(q.d, err))
	}
	return v, nil
}

// SettingPutIfAbsent inserts a setting unless it exists, then reads the
// stored value from the writer (a replica's reader could lag behind the
// insert that won).
func (q *queries) SettingPutIfAbsent(ctx context.Context, name, value string, at int64) (string, error) {
	if _, err := q.exec(ctx, `INSERT INTO settings (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`, name, value, at); err != nil {
		return "", fmt.Errorf("put setting %s: %w", name, err)
	}
	var v string
	if err := q.queryRow(ctx, true, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v); err != nil {
		return "", fmt.Errorf("put setting %s: %w", name, mapErr(q.d, err))
	}
	return v, nil
}
