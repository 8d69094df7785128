package sqlstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/agentplane/agentplane/internal/store"
)

// MessageAppend appends a transcript entry. Its id is new, so nothing but
// a broken transaction fails it: it goes to the database with the next
// statement that is waited for (execLater).
func (q *queries) MessageAppend(ctx context.Context, p *store.MessageAppendParams) (*store.Message, error) {
	err := q.execLater(ctx, `INSERT INTO messages (message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.MessageID, p.SessionID, p.RunID, p.AgentID, p.ParentRunID, p.IntentionID, p.Role, p.Content, p.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("append message to %s: %w", p.SessionID, err)
	}
	return &store.Message{MessageID: p.MessageID, SessionID: p.SessionID, RunID: p.RunID, AgentID: p.AgentID, ParentRunID: p.ParentRunID,
		IntentionID: p.IntentionID, Role: p.Role, Content: p.Content, CreatedAt: p.CreatedAt}, nil
}

// MessagesTranscript: on PostgreSQL one statement — the newest root-level
// messages, their sizes summed newest first, and only the rows within the
// bound (and the one across it) sent back, so a session of huge messages
// costs no more than its bound. On SQLite, where a statement costs no round
// trip but every row visited costs CPU, pages of doubling size (8, 16, …)
// are read until the bound is passed: each row is visited once, and a
// session of huge messages is read no further than about twice what the
// bound lets through.
func (q *queries) MessagesTranscript(ctx context.Context, sessionID string, limit, budget int) ([]store.Message, error) {
	if limit <= 0 || budget <= 0 {
		return []store.Message{}, nil
	}
	if q.d.Name == "sqlite" {
		return q.transcriptPaged(ctx, sessionID, limit, budget)
	}
	// agentplane_transcript (postgres/migrations/0044_messages_root.sql)
	// holds the statement, planned so that it walks the session's newest
	// messages whatever the statistics say.
	rows, err := q.query(ctx, `SELECT `+messageCols+` FROM agentplane_transcript(?, ?, ?)`, sessionID, limit, budget)
	if err != nil {
		return nil, fmt.Errorf("transcript of %s: %w", sessionID, err)
	}
	out, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("transcript of %s: %w", sessionID, err)
	}
	return out, nil
}

// messageCols are the columns scanMessages reads, in its order.
const messageCols = `message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at`

// scanMessages reads rows of messageCols and closes them.
func scanMessages(rows *rows) ([]store.Message, error) {
	defer rows.Close()
	out := []store.Message{}
	for rows.Next() {
		var m store.Message
		if err := rows.Scan(&m.MessageID, &m.SessionID, &m.RunID, &m.AgentID, &m.ParentRunID, &m.IntentionID, &m.Role, &m.Content, &m.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// transcriptFirstPage is the first page transcriptPaged reads; each
// further page doubles it.
const transcriptFirstPage = 8

// transcriptPaged is MessagesTranscript in pages (SQLite).
func (q *queries) transcriptPaged(ctx context.Context, sessionID string, limit, budget int) ([]store.Message, error) {
	newestFirst := []store.Message{}
	before, used := "", 0
	for page := transcriptFirstPage; len(newestFirst) < limit && used <= budget; page *= 2 {
		n := min(page, limit-len(newestFirst))
		msgs, err := q.MessagesList(ctx, &store.MessagesListParams{SessionID: sessionID, Before: before, Limit: n, RootOnly: true})
		if err != nil {
			return nil, fmt.Errorf("transcript of %s: %w", sessionID, err)
		}
		for i := len(msgs) - 1; i >= 0 && used <= budget; i-- {
			newestFirst = append(newestFirst, msgs[i])
			used += len(msgs[i].Content)
		}
		if len(msgs) < n {
			break
		}
		before = msgs[0].MessageID
	}
	slices.Reverse(newestFirst)
	return newestFirst, nil
}

// MessagesList returns the newest p.Limit messages before p.Before, oldest
// first. Message ids are time-ordered, so they double as the paging cursor.
func (q *queries) MessagesList(ctx context.Context, p *store.MessagesListParams) ([]store.Message, error) {
	limit := p.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	cond, orderBy, args := q.inSession(p.SessionID)
	query := `SELECT ` + messageCols + ` FROM messages WHERE ` + cond
	if p.RootOnly {
		query += ` AND parent_run_id = ''`
	}
	if p.Before != "" {
		query += ` AND message_id < ?`
		args = append(args, p.Before)
	}
	query += ` ORDER BY ` + orderBy + `message_id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages of %s: %w", p.SessionID, err)
	}
	out, err := scanMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("list messages of %s: %w", p.SessionID, err)
	}
	slices.Reverse(out)
	return out, nil
}
