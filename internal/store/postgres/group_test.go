package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
)

// runsOfSessions creates n sessions with a run each on st.
func runsOfSessions(t *testing.T, ctx context.Context, st store.Store, n int) []*store.Run {
	t.Helper()
	var runs []*store.Run
	for i := range n {
		sid := fmt.Sprintf("g%d", i)
		if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: "run_" + sid, SessionID: sid, AgentID: "a", Owner: "i", StartedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

// parallel runs fns through the transaction's store.Parallel, failing the
// test if it has none (every PostgreSQL transaction should).
func parallel(ctx context.Context, tx store.Queries, fns []func(store.Queries) error) error {
	p, ok := tx.(store.Parallel)
	if !ok {
		return errors.New("a PostgreSQL transaction's Queries offer no store.Parallel")
	}
	return p.Parallel(ctx, fns)
}

// Independent work in one transaction shares round trips: four sessions'
// steps of two waited-for statements each (lock the run, bump the
// session's seq and read it) take two round trips together where they
// took eight in turn — counted at a TCP proxy in front of the server.
// What each step read and wrote is what it would have alone.
func TestParallelStepsShareRoundTrips(t *testing.T) {
	// A member that waits longer than groupStall for the others sends its
	// statements alone. With -race on a loaded CI machine a goroutine can
	// wait for a core longer than the production 1 ms, which split a batch
	// once (4 round trips instead of 3); the count is about the batching,
	// so the stall is made long enough not to matter here.
	defer postgres.SetGroupStall(2 * time.Second)()
	st, proxy, ctx := openOneConnProxied(t)
	runs := runsOfSessions(t, ctx, st, 4)

	step := func(r *store.Run, seen *int64) func(store.Queries) error {
		return func(tx store.Queries) error {
			locked, err := tx.RunLock(ctx, r.RunID)
			if err != nil {
				return err
			}
			if locked.SessionID != r.SessionID {
				return fmt.Errorf("locked run %s of session %s, want %s", locked.RunID, locked.SessionID, r.SessionID)
			}
			if _, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: r.SessionID, RunID: r.RunID, TS: 1, Type: "state"}}); err != nil {
				return err
			}
			s, err := tx.SessionGet(ctx, r.SessionID)
			if err != nil {
				return err
			}
			*seen = s.LastSeq
			return nil
		}
	}
	for round := int64(1); round <= 2; round++ { // the first prepares the statements
		seen := make([]int64, len(runs))
		var fns []func(store.Queries) error
		for i, r := range runs {
			fns = append(fns, step(r, &seen[i]))
		}
		before := proxy.ClientTurns()
		if err := st.InTx(ctx, func(tx store.Queries) error { return parallel(ctx, tx, fns) }); err != nil {
			t.Fatal(err)
		}
		got := proxy.ClientTurns() - before
		for i, s := range seen {
			if s != round {
				t.Fatalf("round %d: step %d read last_seq %d, want %d", round, i, s, round)
			}
		}
		// Two waited-for statements per step (the run's lock, the session
		// read; the append goes with the read) and the commit.
		if round == 2 && got != 3 {
			t.Fatalf("four steps of two waited-for statements: %d round trips, want 3 (8 + 1 in turn)", got)
		}
	}
	for _, r := range runs {
		evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: r.SessionID, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 {
			t.Fatalf("session %s: %d events (%+v), want seqs 1 and 2", r.SessionID, len(evs), evs)
		}
	}
}

// A statement of one step that fails aborts the transaction: every step
// gets an error, nothing commits, and the pool's one connection serves
// the next transaction. A step that panics panics the caller, once the
// others have returned, and also commits nothing.
func TestParallelStepFailureRollsBackAll(t *testing.T) {
	st, ctx := openOneConn(t)
	runs := runsOfSessions(t, ctx, st, 3)
	if _, err := st.MessageAppend(ctx, message("dup")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var errs [3]error
	err := st.InTx(ctx, func(tx store.Queries) error {
		return parallel(ctx, tx, []func(store.Queries) error{
			func(tx store.Queries) error {
				_, errs[0] = tx.MessageAppend(ctx, message("ok1"))
				if errs[0] == nil {
					_, errs[0] = tx.RunLock(ctx, runs[0].RunID)
				}
				return errs[0]
			},
			func(tx store.Queries) error {
				// The run does not exist: its lock answers no row, which
				// this step turns into an error of its own.
				if _, err := tx.RunLock(ctx, "run_missing"); !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("lock of a missing run: %v", err)
				}
				errs[1] = boom
				return boom
			},
			func(tx store.Queries) error {
				// A taken message id fails on the server: the
				// transaction is aborted for every step from then on.
				if _, err := tx.MessageAppend(ctx, message("dup")); err != nil {
					return err
				}
				_, errs[2] = tx.RunLock(ctx, runs[2].RunID)
				return errs[2]
			},
		})
	})
	if err == nil {
		t.Fatal("a transaction with a failing step committed")
	}
	if errs[2] == nil {
		t.Fatal("the step whose queued insert failed read on after it")
	}
	if n := countMessages(t, st); n != 1 {
		t.Fatalf("%d messages after the failed transaction, want 1 (the one before it)", n)
	}
	if _, err := st.RunLock(ctx, runs[0].RunID); err != nil {
		t.Fatalf("the connection after a failed group: %v", err)
	}

	func() {
		defer func() {
			if v := recover(); v != "step panic" {
				t.Fatalf("recovered %v, want the step's panic", v)
			}
		}()
		_ = st.InTx(ctx, func(tx store.Queries) error {
			return parallel(ctx, tx, []func(store.Queries) error{
				func(tx store.Queries) error {
					_, err := tx.MessageAppend(ctx, message("p1"))
					if err == nil {
						_, err = tx.RunLock(ctx, runs[0].RunID)
					}
					return err
				},
				func(tx store.Queries) error { panic("step panic") },
			})
		})
		t.Fatal("no panic")
	}()
	if n := countMessages(t, st); n != 1 {
		t.Fatalf("%d messages after a panicking group, want 1", n)
	}
	if _, err := st.RunLock(ctx, runs[1].RunID); err != nil {
		t.Fatalf("the connection after a panicking group: %v", err)
	}
}

// A step that waits for something besides the database — a lock another
// step holds while it waits for its statement — does not hang the group:
// the waiting statement is sent after a short stall.
func TestParallelStepBlockedElsewhereDoesNotHang(t *testing.T) {
	st, ctx := openOneConn(t)
	runs := runsOfSessions(t, ctx, st, 2)
	var mu sync.Mutex
	holding := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.InTx(ctx, func(tx store.Queries) error {
			return parallel(ctx, tx, []func(store.Queries) error{
				func(tx store.Queries) error {
					mu.Lock()
					defer mu.Unlock()
					close(holding)
					_, err := tx.RunLock(ctx, runs[0].RunID) // sent while the other is not waiting on the pipe
					return err
				},
				func(tx store.Queries) error {
					<-holding
					mu.Lock()
					mu.Unlock()
					_, err := tx.RunLock(ctx, runs[1].RunID)
					return err
				},
			})
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a group whose step waits on another's lock hung")
	}
}

// The rows a step reads are kept in memory while the batch is read on, and
// scanned as pgx scans them: text, integers, NULLs, JSON bytes, nullable
// types.
func TestParallelStepScansRows(t *testing.T) {
	st, ctx := openOneConn(t)
	runs := runsOfSessions(t, ctx, st, 2)
	got := make([]*store.Run, 2)
	var sess *store.Session
	err := st.InTx(ctx, func(tx store.Queries) error {
		return parallel(ctx, tx, []func(store.Queries) error{
			func(tx store.Queries) error {
				var err error
				got[0], err = tx.RunLock(ctx, runs[0].RunID)
				if err == nil {
					sess, err = tx.SessionGet(ctx, runs[0].SessionID)
				}
				return err
			},
			func(tx store.Queries) error {
				var err error
				got[1], err = tx.RunLock(ctx, runs[1].RunID)
				return err
			},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		want, err := st.RunGet(ctx, runs[i].RunID)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", *r) != fmt.Sprintf("%+v", *want) {
			t.Fatalf("run read in a group:\n %+v\nread alone:\n %+v", *r, *want)
		}
	}
	alone, err := st.SessionGet(ctx, runs[0].SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", *sess) != fmt.Sprintf("%+v", *alone) {
		t.Fatalf("session read in a group:\n %+v\nread alone:\n %+v", *sess, *alone)
	}
}
