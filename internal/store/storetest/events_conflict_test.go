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
		// Plant seq 3 behind the counter's back: the next append of three
		// events takes seqs 2, 3, 4 and conflicts on its second row.
		if _, err := raw.SQL().ExecContext(ctx, `INSERT INTO events (event_id, session_id, seq, run_id, parent_run_id, ts, type, payload) VALUES ('evt_planted', '`+sid+`', 3, '', '', 1, 'planted', '{}')`); err != nil {
			t.Fatal(err)
		}
		_, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, Type: "a", TS: 2}, {SessionID: sid, Type: "b", TS: 2}, {SessionID: sid, Type: "c", TS: 2}})
		if err == nil {
			t.Fatal("append over a planted seq succeeded")
		}
		evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Type != "planted" {
			t.Fatalf("after the failed append the log holds %+v, want seq 1 and the planted row only", evs)
		}
		got, err := s.SessionGet(ctx, sid)
		if err != nil || got.LastSeq != 1 {
			t.Fatalf("session last_seq = %+v, %v; want 1 (the bump rolled back)", got, err)
		}
	})
}
