package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// sessionCols are a session's columns, read from sessions aliased s.
func (q *queries) sessionCols() string {
	if q.d.Name == "sqlite" {
		return `s.session_id, s.user_id, s.created_at, ` + sqliteLastSeq + `, s.metadata`
	}
	return `s.session_id, s.user_id, s.created_at, s.last_seq, s.metadata`
}

// sqliteLastSeq is the last seq of session s on SQLite, where
// sessions.last_seq is only a floor: the highest seq in the events
// index, or the floor when retention has deleted every event above it.
// Appends read it instead of bumping a counter (see EventsAppend): the
// index leaf it reads is the one the insert then writes, so no sessions
// page is written. The MAX is one seek on the (session_id, seq) index.
const sqliteLastSeq = `max(s.last_seq, COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.session_id = s.session_id), 0))`

func scanSession(row interface{ Scan(...any) error }) (*store.Session, error) {
	var s store.Session
	if err := row.Scan(&s.SessionID, &s.UserID, &s.CreatedAt, &s.LastSeq, nullJSON{&s.Metadata}); err != nil {
		return nil, err
	}
	return &s, nil
}

// SessionCreate inserts a session; ErrConflict if the id is taken. ON
// CONFLICT DO NOTHING keeps a PostgreSQL transaction usable after a
// concurrent creator won (it waits for that one to commit), so the caller
// can read the winner's session and go on (issue 8, item 3).
func (q *queries) SessionCreate(ctx context.Context, p *store.SessionCreateParams) (*store.Session, error) {
	res, err := q.exec(ctx, `INSERT INTO sessions (session_id, user_id, created_at, last_seq, metadata) VALUES (?, ?, ?, 0, ?)
		ON CONFLICT (session_id) DO NOTHING`,
		p.SessionID, p.UserID, p.CreatedAt, jsonArg(p.Metadata, "{}"))
	if err != nil {
		return nil, fmt.Errorf("create session %s: %w", p.SessionID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, fmt.Errorf("create session %s: %w", p.SessionID, mapErr(q.d, err))
	} else if n == 0 {
		return nil, fmt.Errorf("create session %s: id taken: %w", p.SessionID, store.ErrConflict)
	}
	return &store.Session{SessionID: p.SessionID, UserID: p.UserID, CreatedAt: p.CreatedAt, Metadata: p.Metadata}, nil
}

// SessionGet reads a session.
func (q *queries) SessionGet(ctx context.Context, sessionID string) (*store.Session, error) {
	s, err := scanSession(q.queryRow(ctx, false, `SELECT `+q.sessionCols()+` FROM sessions s WHERE s.session_id = ?`, sessionID))
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", sessionID, mapErr(q.d, err))
	}
	return s, nil
}
