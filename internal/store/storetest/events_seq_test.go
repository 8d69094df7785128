package storetest

import (
	"context"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A session's seqs never start over or repeat: not after retention has
// deleted every one of its events (SQLite reads the next seq from the
// events, so deleting them must leave the last seq behind), not across two
// appends in one transaction (the second numbers on from the first), and
// not across several sessions appended together.
func TestSessionSeqsNeverRepeat(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a, b := newSession(t, s), newSession(t, s)
		appendSeqs := func(evs ...store.EventParams) []int64 {
			t.Helper()
			got, err := s.EventsAppend(ctx, evs)
			if err != nil {
				t.Fatal(err)
			}
			seqs := make([]int64, len(got))
			for i := range got {
				seqs[i] = got[i].Seq
			}
			return seqs
		}
		lastSeq := func(sid string) int64 {
			t.Helper()
			ses, err := s.SessionGet(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			return ses.LastSeq
		}
		if got := appendSeqs(store.EventParams{SessionID: a, Type: "x", TS: 1}, store.EventParams{SessionID: b, Type: "x", TS: 1}, store.EventParams{SessionID: a, Type: "x", TS: 1}); got[0] != 1 || got[1] != 1 || got[2] != 2 {
			t.Fatalf("first append: seqs %v, want [1 1 2]", got)
		}

		// Retention deletes every event of a: its last seq stays 2 and the
		// next event is 3.
		n, err := s.EventsDeleteBefore(ctx, a, 100, 1000)
		if err != nil || n != 2 {
			t.Fatalf("delete every event of a: %d, %v", n, err)
		}
		if got := lastSeq(a); got != 2 {
			t.Fatalf("last seq of a with no events left = %d, want 2", got)
		}
		if got := appendSeqs(store.EventParams{SessionID: a, Type: "x", TS: 200}); got[0] != 3 {
			t.Fatalf("after deleting every event: seq %d, want 3", got[0])
		}
		// Deleting again (nothing old is left) changes nothing.
		if n, err := s.EventsDeleteBefore(ctx, a, 100, 1000); err != nil || n != 0 {
			t.Fatalf("second delete: %d, %v", n, err)
		}

		// Two appends in one transaction, each over both sessions.
		var first, second []store.Event
		err = s.InTx(ctx, func(tx store.Queries) (err error) {
			if first, err = tx.EventsAppend(ctx, []store.EventParams{{SessionID: a, Type: "y", TS: 201}, {SessionID: b, Type: "y", TS: 201}}); err != nil {
				return err
			}
			second, err = tx.EventsAppend(ctx, []store.EventParams{{SessionID: b, Type: "z", TS: 202}, {SessionID: a, Type: "z", TS: 202}, {SessionID: a, Type: "z", TS: 202}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if first[0].Seq != 4 || first[1].Seq != 2 || second[0].Seq != 3 || second[1].Seq != 5 || second[2].Seq != 6 {
			t.Fatalf("two appends in one transaction: %v then %v, want a 4, b 2, then b 3, a 5, a 6", first, second)
		}
		if lastSeq(a) != 6 || lastSeq(b) != 3 {
			t.Fatalf("last seqs a %d, b %d; want 6, 3", lastSeq(a), lastSeq(b))
		}

		// A transaction that rolls back leaves the seqs to the next one.
		_ = s.InTx(ctx, func(tx store.Queries) error {
			if _, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: a, Type: "gone", TS: 203}}); err != nil {
				return err
			}
			return context.Canceled
		})
		if got := appendSeqs(store.EventParams{SessionID: a, Type: "x", TS: 204}); got[0] != 7 {
			t.Fatalf("after a rolled-back append: seq %d, want 7", got[0])
		}
		evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: a, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+3) {
				t.Fatalf("events of a: %v, want seqs 3..7 without a gap", evs)
			}
		}
	})
}
