package sqlite

import (
	"context"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

// watch gives the writer connection dc a memo (sqlstore.WriteMemo) and
// tells it of every change to the rows it remembers facts of, through
// SQLite's pre-update hook: whatever statement makes the change, on this
// connection, inside the store's transactions or not. Other connections'
// commits are caught by data_version (pipe.Memo). Nil when the driver has
// no hooks.
func watch(dc any) *sqlstore.WriteMemo {
	hr, ok := dc.(sqlite.HookRegisterer)
	if !ok {
		return nil
	}
	memo := sqlstore.NewWriteMemo()
	hr.RegisterPreUpdateHook(func(u sqlite.SQLitePreUpdateData) {
		switch u.TableName {
		case "events":
			if u.Op == sqlite3.SQLITE_INSERT {
				memo.EventInserted()
			}
		case "sessions":
			// Updated by every root message's trigger (its transcript
			// version), so only that session is forgotten.
			if id, ok := changedKey(memo, u); ok {
				memo.SessionChanged(id)
			}
		case "runs":
			if id, ok := changedKey(memo, u); ok {
				memo.RunChanged(id)
			}
		}
	})
	return memo
}

// changedKey is the key of the row u updates or deletes: its first
// column, the table's primary key (sessions.session_id, runs.run_id; the
// tests would see a migration that moved it, an ended run reported
// active). On an insert, or a key it cannot read, false — after
// forgetting everything in the second case.
func changedKey(memo *sqlstore.WriteMemo, u sqlite.SQLitePreUpdateData) (string, bool) {
	if u.Op == sqlite3.SQLITE_INSERT {
		return "", false
	}
	old := make([]any, 1)
	if err := u.Old(old...); err != nil {
		memo.Forget()
		return "", false
	}
	id, ok := old[0].(string)
	if !ok {
		memo.Forget()
	}
	return id, ok
}

// Memo is the writer's memo (sqlstore.Memoizer). Once per transaction it
// asks SQLite whether another connection has committed since the last
// (PRAGMA data_version: a server's own readers never write, but another
// process may share the file, or the pool may have replaced this
// connection for a while); then the memo starts over. Asked inside the
// transaction, which holds the write lock: no commit can come between
// the answer and the memo's use.
func (p *pipe) Memo(ctx context.Context) *sqlstore.WriteMemo {
	m := p.d.memo
	if m == nil || p.failed != nil {
		return nil
	}
	if !p.memoChecked {
		v, err := p.dataVersion(ctx)
		if err != nil {
			return nil
		}
		m.Since(v)
		p.memoChecked = true
	}
	return m
}

func (p *pipe) dataVersion(ctx context.Context) (int64, error) {
	rs, err := p.query(ctx, "PRAGMA data_version", nil)
	if err != nil {
		return 0, err
	}
	defer p.closeOpen()
	if !rs.Next() {
		if err := rs.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("sqlite: PRAGMA data_version returned no row")
	}
	var v int64
	if err := rs.Scan(&v); err != nil {
		return 0, err
	}
	return v, nil
}
