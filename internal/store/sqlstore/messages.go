package sqlstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/agentplane/agentplane/internal/store"
)

// MessageAppend appends a transcript entry.
func (q *queries) MessageAppend(ctx context.Context, p *store.MessageAppendParams) (*store.Message, error) {
	_, err := q.exec(ctx, `INSERT INTO messages (message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.MessageID, p.SessionID, p.RunID, p.AgentID, p.ParentRunID, p.IntentionID, p.Role, p.Content, p.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("append message to %s: %w", p.SessionID, err)
	}
	return &store.Message{MessageID: p.MessageID, SessionID: p.SessionID, RunID: p.RunID, AgentID: p.AgentID, ParentRunID: p.ParentRunID,
		IntentionID: p.IntentionID, Role: p.Role, Content: p.Content, CreatedAt: p.CreatedAt}, nil
}

// MessagesList returns the newest p.Limit messages before p.Before, oldest
// first. Message ids are time-ordered, so they double as the paging cursor.
func (q *queries) MessagesList(ctx context.Context, p *store.MessagesListParams) ([]store.Message, error) {
	limit := p.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	query := `SELECT message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at FROM messages WHERE session_id = ?`
	args := []any{p.SessionID}
	if p.RootOnly {
		query += ` AND parent_run_id = ''`
	}
	if p.Before != "" {
		query += ` AND message_id < ?`
		args = append(args, p.Before)
	}
	query += ` ORDER BY message_id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages of %s: %w", p.SessionID, err)
	}
	defer rows.Close()
	out := []store.Message{}
	for rows.Next() {
		var m store.Message
		if err := rows.Scan(&m.MessageID, &m.SessionID, &m.RunID, &m.AgentID, &m.ParentRunID, &m.IntentionID, &m.Role, &m.Content, &m.CreatedAt); err != nil {
			return nil, fmt.Errorf("list messages of %s: %w", p.SessionID, err)
		}
		out = append(out, m)
	}
	slices.Reverse(out)
	return out, rows.Err()
}
