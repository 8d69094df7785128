package eventlog

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
	"github.com/agentplane/agentplane/internal/testdb"
)

// On PostgreSQL the runs whose output a transaction appends are asserted
// active along with the transaction's other statements instead of asked
// about first (one round trip fewer); when one has ended, the transaction
// fails and runs again, asking first, and that run's output is dropped.
func TestActiveRunsAssertedNotAsked(t *testing.T) {
	st := testdb.Open(t, "postgres")
	db, ok := st.(*sqlstore.DB)
	if !ok {
		t.Fatal("the PostgreSQL store is not a *sqlstore.DB")
	}
	var mu sync.Mutex
	asserted, asked := 0, 0
	db.ObserveQueries(func(q string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.Contains(q, "agentplane_runs_active"):
			asserted++
		case strings.Contains(q, "FROM runs WHERE run_id IN"):
			asked++
		}
	})
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return asserted, asked
	}
	l := New(st, Options{})
	defer l.Stop()
	ctx := context.Background()
	sid := session(t, st)
	r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "elsewhere", StartedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	delta := func(n int) store.EventParams {
		e := ev(sid, "agent_stream_delta", n)
		e.RunID, e.IfRunActive = r.RunID, true
		return e
	}
	if got, err := l.Append(ctx, delta(1), delta(2)); err != nil || len(got) != 2 {
		t.Fatalf("append while active: %v %v", got, err)
	}
	if a, q := counts(); a != 1 || q != 0 {
		t.Fatalf("while the run is active: %d assertions and %d reads of ended runs, want 1 and 0", a, q)
	}
	if _, err := st.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Append(ctx, delta(3), ev(sid, "unconditional", 4))
	if err != nil || len(got) != 1 || got[0].Type != "unconditional" {
		t.Fatalf("append after the end: %v %v", got, err)
	}
	if a, q := counts(); a != 2 || q != 1 {
		t.Fatalf("after the end: %d assertions and %d reads of ended runs, want 2 and 1 (the failed assertion, then asking)", a, q)
	}
	evs, _ := st.EventsList(ctx, &store.EventsListParams{SessionID: sid})
	if len(evs) != 3 {
		t.Fatalf("%d events stored, want 3 (the late delta dropped)", len(evs))
	}
	assertConsecutive(t, evs, 1)
}
