package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A run's events are listed exactly, in seq order, with and without a
// type, paged by after_seq, while other runs of the session interleave —
// deltas included, which events_run leaves out (migration 0043).
func TestEventsOfARunWithDeltas(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, other := newSession(t, s), newSession(t, s)
		// Another session's events come first, so a run's first seq is not 1.
		for i := range 5 {
			if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, RunID: "before", TS: 1, Type: "agent_stream_delta", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}}); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string][]string{} // run → its event types in order
		add := func(session, run, typ string) {
			t.Helper()
			if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: session, RunID: run, TS: 1, Type: typ}}); err != nil {
				t.Fatal(err)
			}
			if session == sid {
				want[run] = append(want[run], typ)
			}
		}
		add(sid, "a", "run_started")
		add(sid, "b", "run_started")
		for i := range 30 {
			add(sid, "a", "agent_stream_delta")
			add(sid, "b", "sub_agent_partial")
			add(other, "a", "agent_stream_delta") // same run id, another session
			if i%10 == 0 {
				add(sid, "a", "llm_call_done")
			}
		}
		add(sid, "a", "run_done")
		add(sid, "deltas-only", "agent_stream_delta")

		types := func(evs []store.Event) []string {
			var out []string
			for _, e := range evs {
				out = append(out, e.Type)
			}
			return out
		}
		count := func(run, typ string) int {
			n := 0
			for _, x := range want[run] {
				if x == typ {
					n++
				}
			}
			return n
		}
		for _, run := range []string{"a", "b"} {
			var all []store.Event
			for after := int64(0); ; {
				page, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, RunID: run, AfterSeq: after, Limit: 7})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				all = append(all, page...)
				after = page[len(page)-1].Seq
			}
			if got := types(all); fmt.Sprint(got) != fmt.Sprint(want[run]) {
				t.Fatalf("run %s: %v, want %v", run, got, want[run])
			}
			for i := 1; i < len(all); i++ {
				if all[i].Seq <= all[i-1].Seq || all[i].RunID != run || all[i].SessionID != sid {
					t.Fatalf("run %s: event %d out of order or not its own: %+v", run, i, all[i])
				}
			}
			for _, typ := range []string{"agent_stream_delta", "sub_agent_partial", "llm_call_done", "run_started"} {
				got, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, RunID: run, Type: typ, Limit: 1000})
				if err != nil || len(got) != count(run, typ) {
					t.Fatalf("run %s type %s: %d events, %v; want %d", run, typ, len(got), err, count(run, typ))
				}
			}
		}
		// Without a session: the run's own session, found through its first event.
		noSession, err := s.EventsList(ctx, &store.EventsListParams{RunID: "b", Limit: 1000})
		if err != nil || fmt.Sprint(types(noSession)) != fmt.Sprint(want["b"]) {
			t.Fatalf("run b without a session: %v, %v", types(noSession), err)
		}
		// A run with deltas only is still listed within its session.
		only, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, RunID: "deltas-only"})
		if err != nil || len(only) != 1 {
			t.Fatalf("deltas-only run: %d events, %v", len(only), err)
		}
		// Another session's run id lists nothing of this one.
		if got, err := s.EventsList(ctx, &store.EventsListParams{SessionID: other, RunID: "b"}); err != nil || len(got) != 0 {
			t.Fatalf("run b in the other session: %d events, %v", len(got), err)
		}
	})
}
