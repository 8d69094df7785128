package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// One append of events whose sessions, runs, parents and types repeat and
// alternate (the statement reuses a column's argument while it repeats)
// stores each event's own values, on both databases.
func TestEventsAppendMixedBatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a, b := newSession(t, s), newSession(t, s)
		var batch []store.EventParams
		for i, p := range []struct{ sid, run, parent, typ string }{
			{a, "run_1", "", "agent_stream_delta"}, {a, "run_1", "", "agent_stream_delta"},
			{b, "run_2", "run_0", "agent_stream_delta"}, {a, "run_1", "", "state"},
			{a, "run_3", "run_0", "state"}, {b, "run_2", "run_0", "agent_stream_delta"},
			{b, "", "", "agent_stream_delta"}, {a, "run_1", "", "agent_stream_delta"},
		} {
			batch = append(batch, store.EventParams{SessionID: p.sid, RunID: p.run, ParentRunID: p.parent, TS: int64(1000 + i),
				Type: p.typ, Payload: json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i))})
		}
		appended, err := s.EventsAppend(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string]store.Event{}
		for _, sid := range []string{a, b} {
			evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				stored[e.EventID] = e
			}
		}
		if len(stored) != len(batch) {
			t.Fatalf("%d events stored, want %d", len(stored), len(batch))
		}
		for i, want := range appended {
			got, p := stored[want.EventID], batch[i]
			if got.SessionID != p.SessionID || got.RunID != p.RunID || got.ParentRunID != p.ParentRunID || got.TS != p.TS ||
				got.Type != p.Type || string(got.Payload) != string(p.Payload) || got.Seq != want.Seq {
				t.Errorf("event %d stored as %+v, appended %+v", i, got, want)
			}
		}
	})
}
