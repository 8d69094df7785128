package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// EventsAppendNotify ends every event-log transaction; on PostgreSQL a
// single session's few events take one statement (seq bump, insert and
// NOTIFY fused), anything else the general path. Both must number,
// store, refuse and notify exactly as EventsAppend + EventsNotify do.
func TestEventsAppendNotify(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		raw, ok := s.(interface{ SQL() *sql.DB })
		if !ok {
			t.Fatal("store exposes no SQL handle")
		}
		origin := ids.New("origin")
		notes := listen(t, raw.SQL(), dialect, origin)
		a, b := newSession(t, s), newSession(t, s)
		if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: a, Type: "first", TS: 1}}); err != nil {
			t.Fatal(err)
		}

		// One session, three events: seqs follow the counter, in order.
		var got []store.Event
		err := s.InTx(ctx, func(tx store.Queries) (err error) {
			got, err = tx.EventsAppendNotify(ctx, []store.EventParams{
				{SessionID: a, RunID: "run_1", Type: "x", TS: 2, Payload: []byte(`{"n":1}`)},
				{SessionID: a, RunID: "run_1", ParentRunID: "run_0", Type: "y", TS: 3},
				{SessionID: a, Type: "z", TS: 4, Payload: []byte(`{"s":"é\u0000"}`)},
			}, origin, []string{a})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		listed, err := s.EventsList(ctx, &store.EventsListParams{SessionID: a})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || len(listed) != 4 {
			t.Fatalf("appended %d, listed %d events; want 3 and 4", len(got), len(listed))
		}
		for i, e := range got {
			l := listed[i+1]
			if e.Seq != int64(i+2) || l.EventID != e.EventID || l.Seq != e.Seq || l.Type != e.Type || l.RunID != e.RunID || l.ParentRunID != e.ParentRunID || l.TS != e.TS {
				t.Fatalf("event %d: returned %+v, stored %+v (want seq %d)", i, e, l, i+2)
			}
		}
		if string(listed[3].Payload) != `{"s":"é\u0000"}` {
			t.Fatalf("payload stored as %s", listed[3].Payload)
		}
		if string(listed[2].Payload) != `{}` {
			t.Fatalf("an empty payload is stored as %s, want {}", listed[2].Payload)
		}
		if ses, err := s.SessionGet(ctx, a); err != nil || ses.LastSeq != 4 {
			t.Fatalf("session last_seq = %+v, %v; want 4", ses, err)
		}
		notes.expect(t, origin+" "+a)

		// Two sessions: the general path, both numbered, one NOTIFY.
		err = s.InTx(ctx, func(tx store.Queries) (err error) {
			got, err = tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: b, Type: "p", TS: 5}, {SessionID: a, Type: "q", TS: 5}}, origin, []string{b, a})
			return err
		})
		if err != nil || got[0].Seq != 1 || got[1].Seq != 5 {
			t.Fatalf("two sessions: %+v, %v; want seqs 1 (b) and 5 (a)", got, err)
		}
		notes.expect(t, origin+" "+b+","+a)

		// Nothing pending is not a call this method gets; an unknown
		// session is ErrNotFound and leaves nothing behind.
		err = s.InTx(ctx, func(tx store.Queries) error {
			_, err := tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: "ses_missing", Type: "x", TS: 1}}, origin, []string{"ses_missing"})
			return err
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown session: %v, want ErrNotFound", err)
		}

		// A conflict part-way writes nothing, bumps nothing, tells no one.
		plantSecondRowFailure(t, raw.SQL(), dialect, a, "c2")
		err = s.InTx(ctx, func(tx store.Queries) error {
			_, err := tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: a, Type: "c1", TS: 6}, {SessionID: a, Type: "c2", TS: 6}}, origin, []string{a})
			return err
		})
		if err == nil {
			t.Fatal("an append over a planted failure succeeded")
		}
		if ses, err := s.SessionGet(ctx, a); err != nil || ses.LastSeq != 5 {
			t.Fatalf("after the refused append last_seq = %+v, %v; want 5", ses, err)
		}
		// A transaction that fails after the append sends nothing either.
		err = s.InTx(ctx, func(tx store.Queries) error {
			if _, err := tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: b, Type: "r", TS: 7}}, origin, []string{b}); err != nil {
				return err
			}
			return errors.New("rolled back on purpose")
		})
		if err == nil {
			t.Fatal("the rolled-back transaction reported success")
		}
		notes.none(t)
	})
}

// notifications collects one test's NOTIFY payloads (PostgreSQL only;
// SQLite sends none, so expect and none check nothing there).
type notifications struct {
	ch     chan string
	prefix string
	on     bool
}

func listen(t *testing.T, db *sql.DB, dialect, origin string) *notifications {
	n := &notifications{ch: make(chan string, 16)}
	if dialect != "postgres" {
		return n
	}
	n.on = true
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `LISTEN `+store.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	go func() {
		defer close(done)
		_ = conn.Raw(func(dc any) error {
			c := dc.(*stdlib.Conn).Conn()
			for {
				msg, err := c.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				// The channel is database-wide: other tests' appends are heard too.
				if strings.HasPrefix(msg.Payload, origin+" ") {
					n.ch <- msg.Payload
				}
			}
		})
	}()
	return n
}

func (n *notifications) expect(t *testing.T, payload string) {
	t.Helper()
	if !n.on {
		return
	}
	select {
	case got := <-n.ch:
		if got != payload {
			t.Fatalf("NOTIFY payload %q, want %q", got, payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no NOTIFY %q", payload)
	}
}

func (n *notifications) none(t *testing.T) {
	t.Helper()
	if !n.on {
		return
	}
	select {
	case got := <-n.ch:
		t.Fatalf("NOTIFY %q from a transaction that did not commit", got)
	case <-time.After(300 * time.Millisecond):
	}
}

// Concurrent transactions appending to one session through the fused
// statement (and, mixed in, the general path) number its events without a
// gap or a duplicate: the counter's row lock orders them as the separate
// UPDATE and INSERT did.
func TestEventsAppendNotifyConcurrent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a, b := newSession(t, s), newSession(t, s)
		const writers, each = 8, 20
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					evs := []store.EventParams{{SessionID: a, Type: "x", TS: int64(i)}, {SessionID: a, Type: "y", TS: int64(i)}}
					sessions := []string{a}
					if i%5 == 0 { // two sessions: the general path
						evs = append(evs, store.EventParams{SessionID: b, Type: "z", TS: int64(i)})
						sessions = append(sessions, b)
					}
					err := s.InTx(ctx, func(tx store.Queries) error {
						out, err := tx.EventsAppendNotify(ctx, evs, fmt.Sprint("origin_w", w), sessions)
						if err == nil && out[1].Seq != out[0].Seq+1 {
							err = fmt.Errorf("one append's seqs %d then %d", out[0].Seq, out[1].Seq)
						}
						return err
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: a, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != writers*each*2 {
			t.Fatalf("%d events in the session, want %d", len(evs), writers*each*2)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("event %d has seq %d: a gap or a duplicate", i, e.Seq)
			}
		}
		if ses, err := s.SessionGet(ctx, a); err != nil || ses.LastSeq != int64(len(evs)) {
			t.Fatalf("last_seq %+v, %v; want %d", ses, err, len(evs))
		}
	})
}
