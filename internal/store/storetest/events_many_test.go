package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// An append of many sessions' events (a delivery batch) numbers each
// session's events on from its last seq, in the batch's order: also when
// the batch is split into several statements and a session's events are in
// more than one, and when its sessions are more than one statement bumps.
// Session ids whose byte order is not the database's collation order get
// their own seqs, and a batch naming a session that does not exist is
// ErrNotFound and writes nothing.
func TestEventsAppendManySessions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		// "B" sorts before "a" by bytes, after it in a linguistic collation.
		suffix := ids.New("")
		var sessions []string
		for _, name := range []string{"ses_B", "ses_a", "ses_b", "ses_A", "ses_1"} {
			id := name + suffix
			if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: id, UserID: "u1", CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, id)
		}
		// Each session starts from a different last seq.
		for i, sid := range sessions {
			for range i {
				if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, TS: 1, Type: "before"}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// 301 events: statements of 256, 32, 8, 4 and 1 rows.
		var batch []store.EventParams
		for i := range 301 {
			batch = append(batch, store.EventParams{SessionID: sessions[(i*7/3)%len(sessions)], TS: int64(i), Type: "many",
				Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		}
		out, err := s.EventsAppend(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		next := map[string]int64{}
		for i, sid := range sessions {
			next[sid] = int64(i) + 1
		}
		for i, e := range out {
			if e.SessionID != batch[i].SessionID || e.Seq != next[e.SessionID] {
				t.Fatalf("event %d: session %s seq %d, want %s seq %d", i, e.SessionID, e.Seq, batch[i].SessionID, next[batch[i].SessionID])
			}
			next[e.SessionID]++
		}
		for _, sid := range sessions {
			evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(evs)) != next[sid]-1 {
				t.Fatalf("session %s holds %d events, want %d", sid, len(evs), next[sid]-1)
			}
			for i, e := range evs {
				if e.Seq != int64(i+1) {
					t.Fatalf("session %s: event %d has seq %d", sid, i, e.Seq)
				}
			}
			if ses, err := s.SessionGet(ctx, sid); err != nil || ses.LastSeq != next[sid]-1 {
				t.Fatalf("session %s: %+v, %v; want last_seq %d", sid, ses, err, next[sid]-1)
			}
		}
		// Payloads are each event's own.
		byID := map[string]store.Event{}
		for _, sid := range sessions {
			evs, _ := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 1000})
			for _, e := range evs {
				byID[e.EventID] = e
			}
		}
		for i, e := range out {
			if got := byID[e.EventID]; got.Seq != e.Seq || string(got.Payload) != string(batch[i].Payload) {
				t.Fatalf("event %d stored as %+v, appended %+v", i, got, e)
			}
		}

		// More sessions than one statement bumps (256): 300 sessions, the
		// first ones twice, the second time after all the others.
		wide := make([]string, 300)
		var wideBatch []store.EventParams
		for i := range wide {
			wide[i] = newSession(t, s)
			wideBatch = append(wideBatch, store.EventParams{SessionID: wide[i], TS: 1, Type: "wide"})
		}
		for i := range 20 {
			wideBatch = append(wideBatch, store.EventParams{SessionID: wide[i], TS: 2, Type: "wide"})
		}
		wideOut, err := s.EventsAppend(ctx, wideBatch)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range wideOut {
			if want := int64(1 + i/300); e.SessionID != wideBatch[i].SessionID || e.Seq != want {
				t.Fatalf("wide batch event %d: session %s seq %d, want %s seq %d", i, e.SessionID, e.Seq, wideBatch[i].SessionID, want)
			}
		}
		if evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: wide[299]}); err != nil || len(evs) != 1 || evs[0].Seq != 1 {
			t.Fatalf("the 300th session holds %+v, %v", evs, err)
		}
		if evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: wide[3]}); err != nil || len(evs) != 2 || evs[1].Seq != 2 || evs[1].TS != 2 {
			t.Fatalf("the 4th session holds %+v, %v", evs, err)
		}

		// A session that does not exist, among others.
		missing := []store.EventParams{{SessionID: sessions[0], TS: 1, Type: "x"}, {SessionID: "ses_missing" + suffix, TS: 1, Type: "x"},
			{SessionID: sessions[1], TS: 1, Type: "x"}}
		if _, err := s.EventsAppend(ctx, missing); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a batch with an unknown session: %v, want ErrNotFound", err)
		}
		for _, sid := range sessions[:2] {
			if ses, err := s.SessionGet(ctx, sid); err != nil || ses.LastSeq != next[sid]-1 {
				t.Fatalf("after the refused batch session %s: %+v, %v; want last_seq %d", sid, ses, err, next[sid]-1)
			}
		}
	})
}
