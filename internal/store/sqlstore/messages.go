package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
// costs no more than its bound — with the session's version in the same
// snapshot. On SQLite, where a statement costs no round trip but every row
// visited costs CPU, the version is read first and then pages of doubling
// size (8, 16, …) until the bound is passed: each row is visited once, and
// a session of huge messages is read no further than about twice what the
// bound lets through. Reading the version before the pages may count fewer
// messages than the pages hold, never more, so a reader comparing versions
// later reads the transcript again rather than miss a message.
func (q *queries) MessagesTranscript(ctx context.Context, sessionID string, limit, budget int) (*store.Transcript, error) {
	if limit <= 0 || budget <= 0 {
		return &store.Transcript{Messages: []store.Message{}}, nil
	}
	if q.d.Name == "sqlite" {
		t := &store.Transcript{}
		err := q.queryRow(ctx, false, `SELECT transcript_version, created_at FROM sessions WHERE session_id = ?`, sessionID).Scan(&t.Version, &t.SessionCreatedAt)
		if err = mapErr(q.d, err); err != nil && !isNotFound(err) {
			return nil, fmt.Errorf("transcript of %s: %w", sessionID, err)
		}
		if t.Messages, err = q.transcriptPaged(ctx, sessionID, limit, budget); err != nil {
			return nil, err
		}
		return t, nil
	}
	// agentplane_transcript (postgres/migrations/0044_messages_root.sql)
	// holds the statement, planned so that it walks the session's newest
	// messages whatever the statistics say; a STABLE function reads in
	// its caller's snapshot, so the version beside it is the same moment.
	rows, err := q.query(ctx, `SELECT transcript_version, `+versionRowFill+` FROM sessions WHERE session_id = ?
		UNION ALL SELECT 0, `+messageCols+` FROM agentplane_transcript(?, ?, ?)`, sessionID, sessionID, limit, budget)
	if err != nil {
		return nil, fmt.Errorf("transcript of %s: %w", sessionID, err)
	}
	t, _, err := scanTranscript(rows)
	if err != nil {
		return nil, fmt.Errorf("transcript of %s: %w", sessionID, err)
	}
	return t, nil
}

// MessagesTranscriptAfter is one statement on both stores: the session's
// version row, then its root-level messages above afterID.
func (q *queries) MessagesTranscriptAfter(ctx context.Context, sessionID, afterID string, limit int) (*store.Transcript, error) {
	// Oldest first from afterID, by the session's index walked forward.
	cond, orderBy, args := q.inSession(sessionID, "ASC")
	rows, err := q.query(ctx, `SELECT transcript_version, `+versionRowFill+` FROM sessions WHERE session_id = ?
		UNION ALL SELECT * FROM (SELECT 0, `+messageCols+` FROM messages WHERE `+cond+` AND parent_run_id = '' AND message_id > ?
			ORDER BY `+orderBy+`message_id ASC LIMIT ?) AS newer`, append(append([]any{sessionID}, args...), afterID, max(limit, 1))...)
	if err != nil {
		return nil, fmt.Errorf("transcript of %s after %s: %w", sessionID, afterID, err)
	}
	t, found, err := scanTranscript(rows)
	if err != nil {
		return nil, fmt.Errorf("transcript of %s after %s: %w", sessionID, afterID, err)
	}
	if !found {
		return nil, fmt.Errorf("transcript of %s: %w", sessionID, store.ErrNotFound)
	}
	return t, nil
}

// versionRowFill fills the message columns of a transcript statement's
// version row (its message_id is empty, which no message's is); its
// created_at is the session's.
const versionRowFill = `'', '', '', '', '', '', '', '', created_at`

// scanTranscript reads a transcript statement's rows — the session's
// version row and messages, in any order — and closes them; found says
// whether the version row was there.
func scanTranscript(rows *rows) (*store.Transcript, bool, error) {
	defer rows.Close()
	t, found := &store.Transcript{Messages: []store.Message{}}, false
	for rows.Next() {
		var version int64
		var m store.Message
		if err := rows.Scan(&version, &m.MessageID, &m.SessionID, &m.RunID, &m.AgentID, &m.ParentRunID, &m.IntentionID, &m.Role, &m.Content, &m.CreatedAt); err != nil {
			return nil, false, err
		}
		if m.MessageID == "" {
			t.Version, t.SessionCreatedAt, found = version, m.CreatedAt, true
			continue
		}
		t.Messages = append(t.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	slices.SortFunc(t.Messages, func(a, b store.Message) int { return strings.Compare(a.MessageID, b.MessageID) })
	return t, found, nil
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
	cond, orderBy, args := q.inSession(p.SessionID, "DESC")
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
