package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const approvalCols = `approval_id, tool_call_id, run_id, session_id, tool_name, status, args_summary, expires_at,
	decided_by, reason, decided_at, created_at`

func scanApproval(row interface{ Scan(...any) error }) (*store.Approval, error) {
	var a store.Approval
	err := row.Scan(&a.ApprovalID, &a.ToolCallID, &a.RunID, &a.SessionID, &a.ToolName, &a.Status, &a.ArgsSummary,
		&a.ExpiresAt, &a.DecidedBy, &a.Reason, nullInt{&a.DecidedAt}, &a.CreatedAt)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func (q *queries) listApprovals(ctx context.Context, what, query string, args ...any) ([]*store.Approval, error) {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	defer rows.Close()
	out := []*store.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", what, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return out, nil
}

// ApprovalInsert inserts a PENDING approval. ON CONFLICT DO NOTHING turns a
// taken id or a second approval for one tool call into ErrConflict without
// aborting a PostgreSQL transaction.
func (q *queries) ApprovalInsert(ctx context.Context, p *store.ApprovalInsertParams) (*store.Approval, error) {
	a, err := scanApproval(q.queryRow(ctx, true, `INSERT INTO approvals (approval_id, tool_call_id, run_id, session_id, tool_name, status,
			args_summary, expires_at, created_at)
		VALUES (?, ?, ?, ?, ?, 'PENDING', ?, ?, ?) ON CONFLICT DO NOTHING RETURNING `+approvalCols,
		p.ApprovalID, p.ToolCallID, p.RunID, p.SessionID, p.ToolName, p.ArgsSummary, p.ExpiresAt, p.At))
	if err == nil {
		return a, nil
	}
	if err = mapErr(q.d, err); errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("insert approval %s: id taken or tool call %s already has one: %w", p.ApprovalID, p.ToolCallID, store.ErrConflict)
	}
	return nil, fmt.Errorf("insert approval %s: %w", p.ApprovalID, err)
}

// ApprovalGet reads an approval.
func (q *queries) ApprovalGet(ctx context.Context, approvalID string) (*store.Approval, error) {
	a, err := scanApproval(q.queryRow(ctx, false, `SELECT `+approvalCols+` FROM approvals WHERE approval_id = ?`, approvalID))
	if err != nil {
		return nil, fmt.Errorf("get approval %s: %w", approvalID, mapErr(q.d, err))
	}
	return a, nil
}

// ApprovalDecide records a decision on a PENDING approval, the deadline
// being part of the guard: a human decision needs At < expires_at, an
// expiry At >= expires_at, so an approval is decided by a human or expired,
// never both, whichever replica's sweeper runs when. On no match it returns
// the current row with ErrConflict: the caller replays an identical recorded
// decision and answers 409 to a different one; a row still PENDING means
// the deadline guard refused (a late decision: expire it instead).
func (q *queries) ApprovalDecide(ctx context.Context, p *store.ApprovalDecideParams) (*store.Approval, error) {
	var guard string
	switch p.Status {
	case store.ApprovalApproved, store.ApprovalRejected:
		guard = ` AND expires_at > ?`
	case store.ApprovalExpired:
		guard = ` AND expires_at <= ?`
	case store.ApprovalCancelled:
	default:
		return nil, fmt.Errorf("decide approval %s: %q is not a decision", p.ID, p.Status)
	}
	args := []any{p.Status, p.DecidedBy, p.Reason, p.At, p.ID}
	if guard != "" {
		args = append(args, p.At)
	}
	a, err := scanApproval(q.queryRow(ctx, true, `UPDATE approvals SET status = ?, decided_by = ?, reason = ?, decided_at = ?
		WHERE approval_id = ? AND status = 'PENDING'`+guard+` RETURNING `+approvalCols, args...))
	if err == nil {
		return a, nil
	}
	if err = mapErr(q.d, err); !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("decide approval %s: %w", p.ID, err)
	}
	cur, err := scanApproval(q.queryRow(ctx, true, `SELECT `+approvalCols+` FROM approvals WHERE approval_id = ?`, p.ID))
	if err != nil {
		return nil, fmt.Errorf("decide approval %s: %w", p.ID, mapErr(q.d, err))
	}
	switch {
	case cur.Status != store.ApprovalPending:
		return cur, fmt.Errorf("approval %s is already %s: %w", p.ID, cur.Status, store.ErrConflict)
	case p.Status == store.ApprovalExpired:
		return cur, fmt.Errorf("approval %s does not expire until %d: %w", p.ID, cur.ExpiresAt, store.ErrConflict)
	default:
		return cur, fmt.Errorf("approval %s expired at %d: %w", p.ID, cur.ExpiresAt, store.ErrConflict)
	}
}

// ApprovalList lists approvals oldest first (newest first with Desc),
// optionally by status, session and user, after a keyset cursor.
func (q *queries) ApprovalList(ctx context.Context, p *store.ApprovalListParams) ([]*store.Approval, error) {
	query := `SELECT ` + approvalCols + ` FROM approvals WHERE 1 = 1`
	var args []any
	if p.Status != "" {
		query += ` AND status = ?`
		args = append(args, p.Status)
	}
	if p.SessionID != "" {
		query += ` AND session_id = ?`
		args = append(args, p.SessionID)
	}
	if p.UserID != "" {
		query += ` AND session_id IN (SELECT session_id FROM sessions WHERE user_id = ?)`
		args = append(args, p.UserID)
	}
	query, args = keyset(query, args, "created_at", "approval_id", p.After, p.Desc)
	args = append(args, listLimit(p.Limit))
	return q.listApprovals(ctx, "approvals", query, args...)
}

// ApprovalListExpired lists PENDING approvals whose deadline has passed,
// earliest first: the sweeper's input.
func (q *queries) ApprovalListExpired(ctx context.Context, now int64, limit int) ([]*store.Approval, error) {
	return q.listApprovals(ctx, "expired approvals", `SELECT `+approvalCols+` FROM approvals
		WHERE status = 'PENDING' AND expires_at <= ? ORDER BY expires_at, approval_id LIMIT ?`, now, listLimit(limit))
}
