package storetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A multi-row event insert that conflicts part-way must leave nothing: on
// SQLite the insert is INSERT OR FAIL (no statement journal, issue 13), which
// keeps the rows before the failing one inside the transaction, so only the
// transaction's rollback stands between them and the log.
func TestEventsAppendConflictMidBatchWritesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, Type: "x", TS: 1}}); err != nil {
			t.Fatal(err)
		}
		raw, ok := s.(interface{ SQL() *sql.DB })
		if !ok {
			t.Skip("store exposes no SQL handle")
		}
		// Make the next append of three events fail on its second row.
		planted := plantSecondRowFailure(t, raw.SQL(), dialect, sid, "b")
		_, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, Type: "a", TS: 2}, {SessionID: sid, Type: "b", TS: 2}, {SessionID: sid, Type: "c", TS: 2}})
		if err == nil {
			t.Fatal("append over a planted failure succeeded")
		}
		evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1+planted || evs[0].Seq != 1 || (planted == 1 && evs[1].Type != "planted") {
			t.Fatalf("after the failed append the log holds %+v, want seq 1 (and a planted row: %d)", evs, planted)
		}
		got, err := s.SessionGet(ctx, sid)
		if err != nil || got.LastSeq != 1 {
			t.Fatalf("session last_seq = %+v, %v; want 1 (the bump rolled back)", got, err)
		}
	})
}

// plantSecondRowFailure makes the next append of sid's events fail on its
// row of type typ, the second, and reports how many rows it planted. On
// PostgreSQL it plants seq 3 behind the counter's back, so that the append
// after seq 1 takes seqs 2, 3, 4 and conflicts on 3. SQLite reads the next
// seq from the events themselves (no counter to go behind), so there a
// trigger fails the row the way a conflict under INSERT OR FAIL does.
func plantSecondRowFailure(t *testing.T, db *sql.DB, dialect, sid, typ string) (planted int) {
	t.Helper()
	ctx := context.Background()
	if dialect == "sqlite" {
		if _, err := db.ExecContext(ctx, `CREATE TRIGGER planted_failure BEFORE INSERT ON events WHEN NEW.type = '`+typ+`'
			BEGIN SELECT RAISE(FAIL, 'planted failure'); END`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db.ExecContext(ctx, `DROP TRIGGER IF EXISTS planted_failure`) })
		return 0
	}
	var last int64
	if err := db.QueryRowContext(ctx, `SELECT last_seq FROM sessions WHERE session_id = $1`, sid).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO events (event_id, session_id, seq, run_id, parent_run_id, ts, type, payload) VALUES ('evt_planted_'||$1, $2, $3, '', '', 1, 'planted', '{}')`, sid, sid, last+2); err != nil {
		t.Fatal(err)
	}
	return 1
}
