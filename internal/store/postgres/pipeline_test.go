package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
	"github.com/agentplane/agentplane/internal/testdb"
)

// openOneConn opens a fresh schema with a pool of one connection, so every
// transaction of a test runs on the connection the one before it left.
func openOneConn(t *testing.T) (*sqlstore.DB, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := postgres.Open(ctx, testdb.DSN(t, "postgres"), postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s1", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	return st, ctx
}

// openOneConnProxied opens a fresh schema with a pool of one connection
// through a TCP proxy that counts the round trips.
func openOneConnProxied(t *testing.T) (*sqlstore.DB, *testdb.Proxy, context.Context) {
	t.Helper()
	proxy, dsn := testdb.PostgresProxy(t, testdb.DSN(t, "postgres"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, proxy, ctx
}

func message(id string) *store.MessageAppendParams {
	return &store.MessageAppendParams{MessageID: id, SessionID: "s1", Role: "user", Content: "hello " + id, CreatedAt: 1}
}

func countMessages(t *testing.T, st *sqlstore.DB) int64 {
	t.Helper()
	return testdb.Count(t, st, `SELECT COUNT(*) FROM messages WHERE session_id = 's1'`)
}

// A transaction's statements are pipelined (a transcript row goes out with
// the next statement that is waited for, an append's seqs arrive with the
// commit): what a failing statement of the pipe does to the transaction
// is what it did before — nothing of it commits, the error names the
// statement, and the connection serves the next transaction.
func TestPipelinedTransactionFailsWhole(t *testing.T) {
	st, ctx := openOneConn(t)

	// A queued insert that fails (the message id is taken) is reported by
	// the commit it went out with.
	if _, err := st.MessageAppend(ctx, message("m1")); err != nil {
		t.Fatal(err)
	}
	err := st.InTx(ctx, func(tx store.Queries) error {
		if _, err := tx.MessageAppend(ctx, message("m2")); err != nil {
			return err
		}
		_, err := tx.MessageAppend(ctx, message("m1")) // queued: no error yet
		return err
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate message id in a pipelined transaction: %v, want ErrConflict", err)
	}
	if n := countMessages(t, st); n != 1 {
		t.Fatalf("%d messages after the failed transaction, want 1 (its other insert rolled back)", n)
	}

	// A queued insert that fails is reported by the read it went out with,
	// and the reads after it are not run on an aborted transaction.
	err = st.InTx(ctx, func(tx store.Queries) error {
		if _, err := tx.MessageAppend(ctx, message("m1")); err != nil {
			return fmt.Errorf("queued statement failed early: %w", err)
		}
		_, err := tx.SessionGet(ctx, "s1")
		return err
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("read after a failing queued insert: %v, want the insert's ErrConflict", err)
	}

	// An append whose row says the session does not exist fails the
	// transaction with the store's ErrNotFound, from the commit.
	err = st.InTx(ctx, func(tx store.Queries) error {
		if _, err := tx.MessageAppend(ctx, message("m3")); err != nil {
			return err
		}
		_, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: "nope", TS: 1, Type: "state"}})
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to a missing session: %v, want ErrNotFound", err)
	}
	if n := countMessages(t, st); n != 1 {
		t.Fatalf("%d messages after the failed append, want 1", n)
	}

	// A panic rolls back too, with a read's rows still open.
	func() {
		defer func() { _ = recover() }()
		_ = st.InTx(ctx, func(tx store.Queries) error {
			if _, err := tx.MessageAppend(ctx, message("m4")); err != nil {
				return err
			}
			if _, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s1", TS: 1, Type: "state"}}); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if n := countMessages(t, st); n != 1 {
		t.Fatalf("%d messages after the panicking transaction, want 1", n)
	}

	// The one connection serves a good transaction after all of that.
	var out []store.Event
	err = st.InTx(ctx, func(tx store.Queries) (err error) {
		if _, err := tx.MessageAppend(ctx, message("m5")); err != nil {
			return err
		}
		out, err = tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s1", TS: 1, Type: "state"}})
		return err
	})
	if err != nil {
		t.Fatalf("transaction after the failures: %v", err)
	}
	if n := countMessages(t, st); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
	if len(out) != 1 || out[0].Seq != 1 {
		t.Fatalf("the append's event after the commit: %+v, want seq 1 (no failed append took a seq)", out)
	}
}

// Appends inside a pipelined transaction get their seqs by the commit, in
// order across appends and in agreement with what the log reads back.
func TestPipelinedAppendSeqsAfterCommit(t *testing.T) {
	st, ctx := openOneConn(t)
	var first, second []store.Event
	err := st.InTx(ctx, func(tx store.Queries) (err error) {
		if first, err = tx.EventsAppend(ctx, []store.EventParams{{SessionID: "s1", TS: 1, Type: "a"}, {SessionID: "s1", TS: 1, Type: "b"}}); err != nil {
			return err
		}
		if _, err := tx.RunGet(ctx, "no-such-run"); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("read between the appends: %v", err)
		}
		second, err = tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: "s1", TS: 1, Type: "c"}}, "origin", []string{"s1"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := []int64{first[0].Seq, first[1].Seq, second[0].Seq}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("seqs after the commit %v, want [1 2 3]", got)
	}
	evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: "s1"})
	if err != nil || len(evs) != 3 {
		t.Fatalf("events read back: %+v, %v", evs, err)
	}
	for i, e := range append(first, second...) {
		if evs[i].EventID != e.EventID || evs[i].Seq != e.Seq || evs[i].Type != e.Type {
			t.Fatalf("event %d read back %+v, appended %+v", i, evs[i], e)
		}
	}
}

// A transaction whose context ends part-way leaves nothing behind: what it
// queued is not committed, and the pool's one connection (or its
// replacement) serves the next transaction.
func TestPipelinedTransactionContextEnds(t *testing.T) {
	st, ctx := openOneConn(t)
	cctx, cancel := context.WithCancel(ctx)
	err := st.InTx(cctx, func(tx store.Queries) error {
		if _, err := tx.MessageAppend(cctx, message("m1")); err != nil {
			return err
		}
		if _, err := tx.SessionGet(cctx, "s1"); err != nil { // sends the queued insert
			return err
		}
		if _, err := tx.MessageAppend(cctx, message("m2")); err != nil {
			return err
		}
		cancel()
		_, err := tx.SessionGet(cctx, "s1")
		return err
	})
	if err == nil {
		t.Fatal("a transaction whose context ended committed")
	}
	if n := countMessages(t, st); n != 0 {
		t.Fatalf("%d messages after the cancelled transaction, want 0", n)
	}
	if err := st.InTx(ctx, func(tx store.Queries) error {
		_, err := tx.MessageAppend(ctx, message("m3"))
		return err
	}); err != nil {
		t.Fatalf("transaction after the cancelled one: %v", err)
	}
	if n := countMessages(t, st); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
}

// What the pipelining is for: a transaction's statements take as few round
// trips as their answers allow, counted at a TCP proxy in front of the
// server. Without it every statement, the BEGIN and the COMMIT were one
// each.
func TestPipelinedTransactionRoundTrips(t *testing.T) {
	st, proxy, ctx := openOneConnProxied(t)
	if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s1", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	runID := "run_1"
	if _, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: runID, SessionID: "s1", AgentID: "a", Owner: "i", StartedAt: 1}); err != nil {
		t.Fatal(err)
	}
	n := 0
	turns := func(name string, want int64, fn func(tx store.Queries) error) {
		t.Helper()
		// Once to prepare the statements on the connection, then counted.
		for i := 0; i < 2; i++ {
			before := proxy.ClientTurns()
			if err := st.InTx(ctx, fn); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := proxy.ClientTurns() - before; i == 1 && got != want {
				t.Fatalf("%s: %d round trips, want %d", name, got, want)
			}
		}
	}
	turns("two transcript rows and the events with their NOTIFY", 1, func(tx store.Queries) error {
		n++
		if _, err := tx.MessageAppend(ctx, message(fmt.Sprintf("a%d", n))); err != nil {
			return err
		}
		if _, err := tx.MessageAppend(ctx, message(fmt.Sprintf("b%d", n))); err != nil {
			return err
		}
		_, err := tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: "s1", RunID: runID, TS: 1, Type: "state"}}, "o", []string{"s1"})
		return err
	})
	if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s2", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	turns("a delivery batch: several sessions' events with their NOTIFY", 1, func(tx store.Queries) error {
		out, err := tx.EventsAppendNotify(ctx, []store.EventParams{{SessionID: "s1", TS: 1, Type: "d"}, {SessionID: "s2", TS: 1, Type: "d"},
			{SessionID: "s1", TS: 1, Type: "d"}}, "o", []string{"s1", "s2"})
		if err == nil && (out[0].Seq == 0 || out[2].Seq != out[0].Seq+1) {
			err = fmt.Errorf("seqs %d, %d, %d", out[0].Seq, out[1].Seq, out[2].Seq)
		}
		return err
	})
	turns("the session with the newest run, then the commit", 2, func(tx store.Queries) error {
		_, _, r, err := tx.SessionGetForRunLatest(ctx, "s1", &store.RunLatestParams{SessionID: "s1", RootOnly: true})
		if err == nil && (r == nil || r.RunID != runID) {
			err = fmt.Errorf("newest run %+v", r)
		}
		return err
	})
	turns("a run's end with its outlook, then the commit", 2, func(tx store.Queries) error {
		_, look, err := tx.RunEndTransition(ctx, &store.RunTransitionParams{RunID: runID, From: []string{store.RunRunning, store.RunDone}, Status: store.RunDone, At: 2}, "s1")
		if err == nil && look == nil {
			err = errors.New("no outlook")
		}
		return err
	})
}
