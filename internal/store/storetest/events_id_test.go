package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// TestMigrateEventsIDUnindexed: a log written before event_id stopped
// being a key is upgraded in place — every event kept with its id, seqs
// still unique per session, appends go on after the last seq, and the
// run's index still finds its events.
func TestMigrateEventsIDUnindexed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		dsn := testdb.DSN(t, dialect)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db := databaseBefore(t, ctx, dialect, dsn, "0045_events_id_unindexed")
		defer db.Close()
		for _, q := range []string{
			`INSERT INTO sessions (session_id, user_id, created_at, last_seq) VALUES ('ses_1', 'u1', 1, 3)`,
			`INSERT INTO events (event_id, session_id, seq, run_id, ts, type, payload) VALUES ('evt_1', 'ses_1', 1, 'run_1', 1, 'run_started', '{"a":1}')`,
			`INSERT INTO events (event_id, session_id, seq, run_id, ts, type, payload) VALUES ('evt_2', 'ses_1', 2, 'run_1', 2, 'agent_stream_delta', '{"text":"hi"}')`,
			`INSERT INTO events (event_id, session_id, seq, run_id, ts, type, payload) VALUES ('evt_3', 'ses_1', 3, 'run_1', 3, 'run_done', '{}')`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		db.Close()

		s := testdb.OpenDSN(t, dsn) // applies the rest of the migrations
		evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: "ses_1", Limit: 10})
		if err != nil || len(evs) != 3 {
			t.Fatalf("events after upgrade: %+v %v", evs, err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || e.EventID != []string{"evt_1", "evt_2", "evt_3"}[i] || e.RunID != "run_1" {
				t.Fatalf("event %d after upgrade: %+v", i, e)
			}
		}
		if string(evs[1].Payload) != `{"text":"hi"}` {
			t.Fatalf("payload after upgrade: %s", evs[1].Payload)
		}
		byRun, err := s.EventsList(ctx, &store.EventsListParams{SessionID: "ses_1", RunID: "run_1", Type: "run_done", Limit: 10})
		if err != nil || len(byRun) != 1 || byRun[0].EventID != "evt_3" {
			t.Fatalf("the run's run_done after upgrade: %+v %v", byRun, err)
		}
		added, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: "ses_1", RunID: "run_2", TS: 4, Type: "run_started"}})
		if err != nil || added[0].Seq != 4 {
			t.Fatalf("append after upgrade: %+v %v", added, err)
		}
		// (session_id, seq) is still unique.
		raw := rawDB(t, dsn)
		defer raw.Close()
		if _, err := raw.ExecContext(ctx, `INSERT INTO events (event_id, session_id, seq, run_id, ts, type, payload) VALUES ('evt_x', 'ses_1', 2, '', 5, 't', '{}')`); err == nil {
			t.Fatal("a second event at seq 2 was accepted")
		}
	})
}
