package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

const auditCols = `audit_id, actor, action, target, ts, detail`

func scanAudit(row interface{ Scan(...any) error }) (*store.AuditEntry, error) {
	var a store.AuditEntry
	if err := row.Scan(&a.AuditID, &a.Actor, &a.Action, &a.Target, &a.TS, nullJSON{&a.Detail}); err != nil {
		return nil, err
	}
	return &a, nil
}

// AuditInsert appends one audit row.
func (q *queries) AuditInsert(ctx context.Context, p *store.AuditInsertParams) (*store.AuditEntry, error) {
	a, err := scanAudit(q.queryRow(ctx, true, `INSERT INTO audit (`+auditCols+`) VALUES (?, ?, ?, ?, ?, ?) RETURNING `+auditCols,
		p.AuditID, p.Actor, p.Action, p.Target, p.TS, jsonArg(p.Detail, "{}")))
	if err != nil {
		return nil, fmt.Errorf("audit %s %s: %w", p.Action, p.Target, mapErr(q.d, err))
	}
	return a, nil
}

// AuditList pages through the audit log, newest first, by (ts, audit_id).
func (q *queries) AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	var where []string
	var args []any
	if p.Actor != "" {
		where, args = append(where, `actor = ?`), append(args, p.Actor)
	}
	if p.Action != "" {
		where, args = append(where, `action = ?`), append(args, p.Action)
	}
	if p.Since > 0 {
		where, args = append(where, `ts >= ?`), append(args, p.Since)
	}
	if p.Until > 0 {
		where, args = append(where, `ts <= ?`), append(args, p.Until)
	}
	if p.BeforeID != "" {
		where, args = append(where, `(ts < ? OR (ts = ? AND audit_id < ?))`), append(args, p.BeforeTS, p.BeforeTS, p.BeforeID)
	}
	query := `SELECT ` + auditCols + ` FROM audit`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY ts DESC, audit_id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	out := []*store.AuditEntry{}
	for rows.Next() {
		a, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("list audit: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
