package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

const sessionCols = `session_id, user_id, created_at, last_seq, metadata`

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
	s, err := scanSession(q.queryRow(ctx, false, `SELECT `+sessionCols+` FROM sessions WHERE session_id = ?`, sessionID))
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", sessionID, mapErr(q.d, err))
	}
	return s, nil
}
