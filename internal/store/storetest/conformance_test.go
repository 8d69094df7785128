// Package storetest is the store conformance suite: every test runs against
// SQLite and PostgreSQL alike, each on a fresh database.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

func newSession(t testing.TB, s store.Store) string {
	t.Helper()
	id := ids.New("ses")
	if _, err := s.SessionCreate(context.Background(), &store.SessionCreateParams{SessionID: id, UserID: "u1", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	return id
}

// messageKept reports whether sessionID's transcript holds messageID: what
// a transaction wrote, kept only if it committed.
func messageKept(t testing.TB, s store.Store, sessionID, messageID string) bool {
	t.Helper()
	msgs, err := s.MessagesList(context.Background(), &store.MessagesListParams{SessionID: sessionID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.MessageID == messageID {
			return true
		}
	}
	return false
}

func TestSessions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		id := newSession(t, s)
		got, err := s.SessionGet(ctx, id)
		if err != nil || got.UserID != "u1" || got.LastSeq != 0 {
			t.Fatalf("get = %+v, %v", got, err)
		}
		if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: id, UserID: "u2", CreatedAt: 2}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate create: %v, want ErrConflict", err)
		}
		if _, err := s.SessionGet(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing: %v, want ErrNotFound", err)
		}
	})
}

func TestEventsSeqIsGapFreeUnderConcurrency(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a, b := newSession(t, s), newSession(t, s)
		const writers, each = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					evs := []store.EventParams{
						{SessionID: a, RunID: "r", TS: int64(i), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))},
						{SessionID: b, TS: int64(i), Type: "t"},
						{SessionID: a, TS: int64(i), Type: "t2"},
					}
					out, err := s.EventsAppend(ctx, evs)
					if err != nil {
						errs <- err
						return
					}
					// Within one append, a session's events get consecutive seqs.
					if out[2].Seq != out[0].Seq+1 {
						errs <- fmt.Errorf("non-consecutive seqs in one append: %d then %d", out[0].Seq, out[2].Seq)
						return
					}
					// One session's few events: one statement on PostgreSQL.
					one, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: b, TS: int64(i), Type: "one"}, {SessionID: b, TS: int64(i), Type: "one"}})
					if err != nil {
						errs <- err
						return
					}
					if one[1].Seq != one[0].Seq+1 || one[0].SessionID != b {
						errs <- fmt.Errorf("one session's append: seqs %d then %d", one[0].Seq, one[1].Seq)
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
		for sid, want := range map[string]int{a: writers * each * 2, b: writers * each * 3} {
			var all []store.Event
			after := int64(0)
			for {
				page, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, AfterSeq: after, Limit: 97})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				all = append(all, page...)
				after = page[len(page)-1].Seq
			}
			if len(all) != want {
				t.Fatalf("session has %d events, want %d", len(all), want)
			}
			for i, e := range all {
				if e.Seq != int64(i+1) {
					t.Fatalf("event %d has seq %d: gap or duplicate", i, e.Seq)
				}
				if e.EventID == "" || e.SessionID != sid {
					t.Fatalf("bad event %+v", e)
				}
			}
			sess, _ := s.SessionGet(ctx, sid)
			if sess.LastSeq != int64(want) {
				t.Fatalf("last_seq = %d, want %d", sess.LastSeq, want)
			}
		}
		typed, err := s.EventsList(ctx, &store.EventsListParams{SessionID: a, Type: "t2", Limit: 10000})
		if err != nil || len(typed) != writers*each {
			t.Fatalf("by type: %d events, %v", len(typed), err)
		}
		byRun, err := s.EventsList(ctx, &store.EventsListParams{RunID: "r"})
		if err != nil || len(byRun) != writers*each {
			t.Fatalf("by run: %d events, %v", len(byRun), err)
		}
		var p struct{ W, I int }
		if err := json.Unmarshal(byRun[0].Payload, &p); err != nil {
			t.Fatalf("payload not JSON: %s", byRun[0].Payload)
		}
	})
}

func TestEventsAppendToUnknownSessionFailsAndWritesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a := newSession(t, s)
		_, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: a, Type: "x"}, {SessionID: "missing", Type: "x"}})
		if err == nil {
			t.Fatal("append to unknown session succeeded")
		}
		evs, _ := s.EventsList(ctx, &store.EventsListParams{SessionID: a})
		if len(evs) != 0 {
			t.Fatalf("partial append left %d events", len(evs))
		}
	})
}

func TestRunsOneActiveRootPerSession(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		r1, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", UserID: "u1", Owner: "i1", StartedAt: 5})
		if err != nil || r1.Status != store.RunRunning || r1.EndedAt != 0 {
			t.Fatalf("insert: %+v %v", r1, err)
		}
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "i1", StartedAt: 6}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second root run: %v, want ErrConflict", err)
		}
		child, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: r1.RunID, Owner: "i1", StartedAt: 7})
		if err != nil || child.ParentRunID != r1.RunID {
			t.Fatalf("child run: %+v %v", child, err)
		}
		done, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: r1.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: 9, Usage: json.RawMessage(`{"tokens":3}`)})
		if err != nil || done.Status != store.RunDone || done.EndedAt != 9 || string(done.Usage) == "" {
			t.Fatalf("transition: %+v %v", done, err)
		}
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "i1", StartedAt: 10}); err != nil {
			t.Fatalf("new root after the first ended: %v", err)
		}
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: "missing", AgentID: "a", Owner: "i1", StartedAt: 10}); err == nil {
			t.Fatal("run in unknown session inserted")
		}
	})
}

func TestRunTransitionIsGuarded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		r, _ := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "i1", StartedAt: 1})
		paused, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: []string{store.RunRunning}, Status: store.RunPausedWaitingTool, At: 2})
		if err != nil || paused.Status != store.RunPausedWaitingTool || paused.EndedAt != 0 {
			t.Fatalf("pause: %+v %v", paused, err)
		}
		// 30 racers try to end the run different ways: exactly one wins.
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				to := []string{store.RunDone, store.RunFailed, store.RunCancelled}[i%3]
				_, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: to, At: 3,
					Error: json.RawMessage(`{"code":"x"}`)})
				if err == nil {
					wins.Add(1)
				} else if !errors.Is(err, store.ErrConflict) {
					t.Errorf("racer: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d transitions won, want exactly 1", wins.Load())
		}
		cur, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: store.RunRunning, At: 4})
		if !errors.Is(err, store.ErrConflict) || cur == nil || !store.RunIsTerminal(cur.Status) || cur.EndedAt != 3 {
			t.Fatalf("transition out of terminal: %+v %v, want current row + ErrConflict", cur, err)
		}
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: "nope", From: store.RunActiveStatuses, Status: store.RunDone, At: 4}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown run: %v, want ErrNotFound", err)
		}
		active, err := s.RunListActive(ctx, &store.RunListActiveParams{})
		if err != nil || len(active) != 0 {
			t.Fatalf("active = %v %v", active, err)
		}
	})
}

func TestRunListActiveByOwner(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for i, owner := range []string{"i1", "i2", "i1"} {
			sid := newSession(t, s)
			if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: owner, StartedAt: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		mine, err := s.RunListActive(ctx, &store.RunListActiveParams{Owner: "i1"})
		if err != nil || len(mine) != 2 {
			t.Fatalf("owner i1: %d runs, %v", len(mine), err)
		}
		all, _ := s.RunListActive(ctx, &store.RunListActiveParams{})
		if len(all) != 3 {
			t.Fatalf("all: %d", len(all))
		}
	})
}

func TestInTxRollsBackEverything(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		boom := errors.New("boom")
		runID := ids.New("run")
		err := s.InTx(ctx, func(tx store.Queries) error {
			if _, err := tx.RunInsert(ctx, &store.RunInsertParams{RunID: runID, SessionID: sid, AgentID: "a", Owner: "i", StartedAt: 1}); err != nil {
				return err
			}
			if _, err := tx.EventsAppend(ctx, []store.EventParams{{SessionID: sid, RunID: runID, Type: "run_started"}}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx = %v", err)
		}
		if _, err := s.RunGet(ctx, runID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("run survived rollback: %v", err)
		}
		sess, _ := s.SessionGet(ctx, sid)
		if sess.LastSeq != 0 {
			t.Fatalf("seq counter survived rollback: %d", sess.LastSeq)
		}
	})
}

func TestMessagesPaging(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		for i := range 7 {
			if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, Role: "user", Content: fmt.Sprint(i), CreatedAt: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		last3, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid, Limit: 3})
		if err != nil || len(last3) != 3 || last3[0].Content != "4" || last3[2].Content != "6" {
			t.Fatalf("newest page: %+v %v", last3, err)
		}
		older, _ := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid, Limit: 3, Before: last3[0].MessageID})
		if len(older) != 3 || older[0].Content != "1" || older[2].Content != "3" {
			t.Fatalf("older page: %+v", older)
		}
		empty, _ := s.MessagesList(ctx, &store.MessagesListParams{SessionID: "other"})
		if empty == nil || len(empty) != 0 {
			t.Fatalf("other session: %+v", empty)
		}
	})
}

func TestAgents(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a, err := s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a1", Name: "A", Endpoint: "http://x", Capabilities: json.RawMessage(`["chat"]`), KeyHash: "h1", At: 1})
		if err != nil || a.Status != store.AgentUnknown || a.CreatedAt != 1 {
			t.Fatalf("register: %+v %v", a, err)
		}
		a, err = s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a1", Name: "A2", Endpoint: "http://y", At: 2})
		if err != nil || a.KeyHash != "h1" || a.Name != "A2" || a.CreatedAt != 1 || a.UpdatedAt != 2 {
			t.Fatalf("re-register keeps key: %+v %v", a, err)
		}
		var caps []string
		if err := json.Unmarshal(a.Capabilities, &caps); err != nil {
			t.Fatalf("capabilities %s: %v", a.Capabilities, err)
		}
		if got, err := s.AgentGetByKeyHash(ctx, "h1"); err != nil || got.AgentID != "a1" {
			t.Fatalf("by key: %+v %v", got, err)
		}
		if _, err := s.AgentGetByKeyHash(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key: %v", err)
		}
		if _, err := s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a2", Name: "B", Endpoint: "http://z", KeyHash: "h1", At: 3}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate key hash: %v", err)
		}
		if a, err := s.AgentHeartbeat(ctx, "a1", 5); err != nil || a.LastHeartbeatAt != 5 || a.Status != store.AgentHealthy {
			t.Fatalf("heartbeat: %+v %v", a, err)
		}
		if err := s.AgentSetStatus(ctx, "a1", store.AgentUnhealthy, 6); err != nil {
			t.Fatal(err)
		}
		list, _ := s.AgentList(ctx)
		if len(list) != 1 || list[0].Status != store.AgentUnhealthy || list[0].LastProbeAt != 6 {
			t.Fatalf("list: %+v", list)
		}
		if err := s.AgentDelete(ctx, "a1"); err != nil {
			t.Fatal(err)
		}
		if err := s.AgentDelete(ctx, "a1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("double delete: %v", err)
		}
		if _, err := s.AgentHeartbeat(ctx, "a1", 7); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("heartbeat deleted: %v", err)
		}
	})
}

func TestContextVersions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		zero := int64(0)
		b1, err := s.ContextPut(ctx, &store.ContextPutParams{OwnerID: "a1", Key: "k", Data: json.RawMessage(`{"v":1}`), IfVersion: &zero, At: 1})
		if err != nil || b1.Version != 1 {
			t.Fatalf("put v1: %+v %v", b1, err)
		}
		if _, err := s.ContextPut(ctx, &store.ContextPutParams{OwnerID: "a1", Key: "k", Data: json.RawMessage(`{}`), IfVersion: &zero, At: 2}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("stale if_version: %v", err)
		}
		b2, err := s.ContextPut(ctx, &store.ContextPutParams{OwnerID: "a1", Key: "k", Data: json.RawMessage(`[1,2]`), At: 3})
		if err != nil || b2.Version != 2 {
			t.Fatalf("put v2: %+v %v", b2, err)
		}
		latest, err := s.ContextGet(ctx, "a1", "k", 0)
		if err != nil || latest.Version != 2 {
			t.Fatalf("latest: %+v %v", latest, err)
		}
		v1, err := s.ContextGet(ctx, "a1", "k", 1)
		if err != nil || v1.Version != 1 {
			t.Fatalf("v1: %+v %v", v1, err)
		}
		var d map[string]int
		if err := json.Unmarshal(v1.Data, &d); err != nil || d["v"] != 1 {
			t.Fatalf("v1 data %s", v1.Data)
		}
		if _, err := s.ContextGet(ctx, "a2", "k", 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("other owner sees key: %v", err)
		}
		// Concurrent writers without a version check all land, on distinct versions.
		var wg sync.WaitGroup
		var okCount atomic.Int32
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if _, err := s.ContextPut(ctx, &store.ContextPutParams{OwnerID: "a1", Key: "c", Data: json.RawMessage(`1`), At: 4}); err == nil {
						okCount.Add(1)
						return
					} else if !errors.Is(err, store.ErrConflict) {
						t.Errorf("put: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		last, _ := s.ContextGet(ctx, "a1", "c", 0)
		if last == nil || last.Version != int64(okCount.Load()) {
			t.Fatalf("latest version %+v after %d successful puts", last, okCount.Load())
		}
	})
}

func TestInstances(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for _, at := range []int64{1, 2} {
			if err := s.InstanceHeartbeat(ctx, "i1", at); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.InstanceList(ctx)
		if err != nil || len(list) != 1 || list[0].HeartbeatAt != 2 {
			t.Fatalf("instances: %+v %v", list, err)
		}
	})
}

func TestInTxRollsBackOnPanic(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		func() {
			defer func() { recover() }()
			s.InTx(ctx, func(tx store.Queries) error {
				tx.EventsAppend(ctx, []store.EventParams{{SessionID: sid, Type: "x"}})
				panic("boom")
			})
		}()
		// The writer is free again and nothing was kept.
		evs, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, Type: "y"}})
		if err != nil || evs[0].Seq != 1 {
			t.Fatalf("after a panicking transaction: %v %v", evs, err)
		}
	})
}

// RunLock serialises transactions on one run: a second locker waits for
// the first to commit and then sees its change (on SQLite the single writer
// gives the same order).
func TestRunLockSerialises(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		r, _ := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "i1", StartedAt: 1})
		if _, err := s.RunLock(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown run: %v", err)
		}
		// 20 transactions each lock the run, read its status and flip it
		// (RUNNING ⇄ PAUSED_WAITING_TOOL) with a guard on what they read:
		// with the lock none of them can see a stale status.
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.InTx(ctx, func(tx store.Queries) error {
					cur, err := tx.RunLock(ctx, r.RunID)
					if err != nil {
						return err
					}
					to := store.RunPausedWaitingTool
					if cur.Status == to {
						to = store.RunRunning
					}
					_, err = tx.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: []string{cur.Status}, Status: to, At: 2})
					return err
				})
				if err != nil {
					t.Errorf("locked flip: %v", err)
				}
			}()
		}
		wg.Wait()
		if cur, _ := s.RunGet(ctx, r.RunID); cur.Status != store.RunRunning {
			t.Fatalf("after 20 flips the run is %s, want RUNNING", cur.Status)
		}
	})
}
