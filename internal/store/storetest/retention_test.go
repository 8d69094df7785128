package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// fillSession gives a session with an ended run events, messages, a tool
// call with an approval.
func fillSession(t *testing.T, s store.Store, events int) (sessionID, runID string) {
	t.Helper()
	ctx := context.Background()
	sessionID, runID = newRun(t, s)
	c := reach(t, s, sessionID, runID, store.ToolCallWaitingApproval)
	if _, err := s.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: ids.New("ap"), ToolCallID: c.ToolCallID, RunID: runID, SessionID: sessionID, ToolName: "x", ExpiresAt: 99, At: 30}); err != nil {
		t.Fatal(err)
	}
	var evs []store.EventParams
	for i := range events {
		evs = append(evs, store.EventParams{SessionID: sessionID, RunID: runID, TS: int64(100 + i), Type: "t", Payload: json.RawMessage(`{}`)})
	}
	if _, err := s.EventsAppend(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sessionID, RunID: runID, Role: "user", Content: "hi", CreatedAt: 50}); err != nil {
			t.Fatal(err)
		}
	}
	return sessionID, runID
}

func endRun(t *testing.T, s store.Store, runID string, at int64) {
	t.Helper()
	if _, err := s.RunTransition(context.Background(), &store.RunTransitionParams{RunID: runID, From: store.RunActiveStatuses, Status: store.RunDone, At: at}); err != nil {
		t.Fatal(err)
	}
}

func rowsOf(t *testing.T, s store.Store, sessionID string) string {
	t.Helper()
	out := ""
	for _, table := range []string{"sessions", "runs", "events", "messages", "tool_calls", "approvals"} {
		out += fmt.Sprintf("%s=%d ", table, testdb.Count(t, s, `SELECT COUNT(*) FROM `+table+` WHERE session_id = '`+sessionID+`'`))
	}
	return out
}

// A purge is decided only for a session without an active run (and idle
// since the cutoff when one is given), holds off new runs (SessionPurging),
// deletes in batches table by table, and leaves other sessions alone.
func TestSessionPurge(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		old, oldRun := fillSession(t, s, 23)
		other, _ := fillSession(t, s, 5) // its run stays active
		before := rowsOf(t, s, other)

		begin := func(id string, idle int64) error {
			return s.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: id, IdleBefore: idle, Owner: "p1", Reason: "test", At: 1000})
		}
		if err := begin(old, 0); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("purge with an active run: %v", err)
		}
		endRun(t, s, oldRun, 500)
		a, err := s.SessionActivityGet(ctx, old)
		if err != nil || a.Active || a.LastActivity != 500 || len(a.Agents) != 1 || a.Agents[0] != "a1" {
			t.Fatalf("activity = %+v, %v", a, err)
		}
		if err := begin(old, 500); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("purge of a session active at the cutoff: %v", err)
		}
		if err := begin("nope", 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("purge of no session: %v", err)
		}
		if purging, err := s.SessionPurging(ctx, old); err != nil || purging {
			t.Fatalf("purging before = %v, %v", purging, err)
		}
		if sess, purging, err := s.SessionGetForRun(ctx, old); err != nil || purging || sess.SessionID != old || sess.LastSeq != 23 {
			t.Fatalf("for a run before: %+v, %v, %v", sess, purging, err)
		}
		if err := begin(old, 501); err != nil {
			t.Fatal(err)
		}
		if sess, purging, err := s.SessionGetForRun(ctx, old); err != nil || !purging || sess.SessionID != old {
			t.Fatalf("for a run while purging: %+v, %v, %v", sess, purging, err)
		}
		if _, _, err := s.SessionGetForRun(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("for a run of no session: %v", err)
		}
		if err := begin(old, 501); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second purge: %v", err)
		}
		if purging, err := s.SessionPurging(ctx, old); err != nil || !purging {
			t.Fatalf("purging = %v, %v", purging, err)
		}
		if purging, err := s.SessionPurging(ctx, "nope"); err != nil || purging {
			t.Fatalf("purging of no session = %v, %v", purging, err)
		}
		total := store.SessionPurgeCounts{}
		batches := 0
		for {
			c, done, err := s.SessionPurgeBatch(ctx, old, 10)
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
			batches++
			for k, v := range c {
				if v > 10 {
					t.Fatalf("a batch deleted %d %s", v, k)
				}
				total[k] += v
			}
		}
		if total["events"] != 23 || total["messages"] != 3 || total["runs"] != 1 || total["tool_calls"] != 1 || total["approvals"] != 1 || batches != 3+1+1+1+1 {
			t.Fatalf("deleted %v in %d batches", total, batches)
		}
		if err := s.InTx(ctx, func(tx store.Queries) error { return tx.SessionPurgeFinish(ctx, old, 2000) }); err != nil {
			t.Fatal(err)
		}
		if got := rowsOf(t, s, old); got != "sessions=0 runs=0 events=0 messages=0 tool_calls=0 approvals=0 " {
			t.Fatalf("left: %s", got)
		}
		if got := rowsOf(t, s, other); got != before {
			t.Fatalf("the other session went from %s to %s", before, got)
		}
		// The id stays a tombstone: no new run may start under it until
		// the tombstone is pruned.
		if purging, err := s.SessionPurging(ctx, old); err != nil || !purging {
			t.Fatalf("tombstone: %v, %v", purging, err)
		}
		if stale, err := s.SessionPurgesStale(ctx, 1<<62, 10); err != nil || len(stale) != 0 {
			t.Fatalf("a finished purge listed as stale: %v, %v", stale, err)
		}
		if n, err := s.SessionTombstonesPrune(ctx, 2000); err != nil || n != 0 {
			t.Fatalf("pruned a fresh tombstone: %d, %v", n, err)
		}
		if n, err := s.SessionTombstonesPrune(ctx, 2001); err != nil || n != 1 {
			t.Fatalf("prune = %d, %v", n, err)
		}
		if purging, err := s.SessionPurging(ctx, old); err != nil || purging {
			t.Fatalf("after prune: %v, %v", purging, err)
		}
	})
}

// A purge whose owner went quiet is listed and claimed by one process.
func TestSessionPurgeResume(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		if err := s.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: sid, Owner: "dead", At: 100}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.SessionPurgesStale(ctx, 100, 10); err != nil || len(got) != 0 {
			t.Fatalf("fresh purge listed as stale: %v %v", got, err)
		}
		got, err := s.SessionPurgesStale(ctx, 101, 10)
		if err != nil || len(got) != 1 || got[0].Owner != "dead" {
			t.Fatalf("stale = %v, %v", got, err)
		}
		if err := s.SessionPurgeClaim(ctx, got[0], "p2", 200); err != nil {
			t.Fatal(err)
		}
		if err := s.SessionPurgeClaim(ctx, got[0], "p3", 201); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second claim of the same reading: %v", err)
		}
	})
}

// Old events of an agent's session go from the oldest, and only a prefix:
// an event stamped after the cutoff stops the deletion, so what remains has
// no gap in its seqs.
func TestEventsDeleteBefore(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		var evs []store.EventParams
		for _, ts := range []int64{1, 2, 3, 9, 4, 5} { // seq 1..6; seq 4 is late-stamped
			evs = append(evs, store.EventParams{SessionID: sid, TS: ts, Type: "t", Payload: json.RawMessage(`{}`)})
		}
		if _, err := s.EventsAppend(ctx, evs); err != nil {
			t.Fatal(err)
		}
		n, err := s.EventsDeleteBefore(ctx, sid, 6, 2)
		if err != nil || n != 2 {
			t.Fatalf("first batch = %d, %v", n, err)
		}
		n, err = s.EventsDeleteBefore(ctx, sid, 6, 2)
		if err != nil || n != 1 {
			t.Fatalf("second batch = %d, %v (stops before the event stamped 9)", n, err)
		}
		left, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 10})
		if err != nil || len(left) != 3 || left[0].Seq != 4 {
			t.Fatalf("left %v, %v", left, err)
		}
	})
}
