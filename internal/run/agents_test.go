package run

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
	"github.com/agentplane/agentplane/internal/testdb"
)

// countingAgent is an SSE agent answering every invoke with "done",
// counting the invokes it got.
func countingAgent(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("event: done\ndata: {}\n\n"))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// registerAgent writes agentID at url through m, as the API does.
func registerAgent(t *testing.T, m *Manager, agentID, url string) {
	t.Helper()
	ctx := context.Background()
	if err := m.WriteAgents(ctx, func(tx store.Queries) error {
		_, err := tx.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: agentID, Name: agentID, Endpoint: url,
			Capabilities: json.RawMessage(`[]`), LinkedAgents: json.RawMessage(`[]`), At: time.Now().UnixMilli()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// An agent's row is read once for many runs; registering it again or
// deleting it through WriteAgents applies to the very next run.
func TestAgentRowsKeptUntilWritten(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		db, ok := st.(*sqlstore.DB)
		if !ok {
			t.Fatal("the store is not a *sqlstore.DB")
		}
		var reads atomic.Int64
		db.ObserveQueries(func(q string) {
			if strings.Contains(q, "FROM agents WHERE agent_id") {
				reads.Add(1)
			}
		})
		ctx := context.Background()
		first, firstCalls := countingAgent(t)
		m := newTestManager(t, st, Options{}, "a", first.URL)
		start := func() (*Started, error) {
			return m.StartRun(ctx, StartParams{UserID: "u", AgentID: "a", Message: agent.Message{Role: "user", Content: "hi"}})
		}
		for range 3 {
			s, err := start()
			if err != nil {
				t.Fatal(err)
			}
			waitEnded(t, st, s.Run.RunID)
		}
		if n := reads.Load(); n != 1 {
			t.Fatalf("the agent's row was read %d times for three runs, want once", n)
		}
		if n := firstCalls.Load(); n != 3 {
			t.Fatalf("the agent got %d invokes, want 3", n)
		}

		second, secondCalls := countingAgent(t)
		registerAgent(t, m, "a", second.URL)
		s, err := start()
		if err != nil {
			t.Fatal(err)
		}
		waitEnded(t, st, s.Run.RunID)
		if secondCalls.Load() != 1 || firstCalls.Load() != 3 {
			t.Fatalf("after the agent moved: %d invokes at its new endpoint, %d at the old (want 1, 3)", secondCalls.Load(), firstCalls.Load())
		}

		if err := m.WriteAgents(ctx, func(tx store.Queries) error { return tx.AgentDelete(ctx, "a") }); err != nil {
			t.Fatal(err)
		}
		if _, err := start(); !errors.Is(err, ErrAgentNotFound) {
			t.Fatalf("a run of the deleted agent: %v, want ErrAgentNotFound", err)
		}
		if _, err := m.Agent(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the deleted agent's row: %v", err)
		}

		// Absence is not taken from the cache: an agent registered a
		// moment ago elsewhere — here straight into the store, as another
		// replica whose word has not arrived — is found.
		if _, err := st.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a", Name: "a", Endpoint: second.URL,
			Capabilities: json.RawMessage(`[]`), LinkedAgents: json.RawMessage(`[]`), At: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		if s, err := start(); err != nil {
			t.Fatalf("a run of the agent registered elsewhere: %v", err)
		} else {
			waitEnded(t, st, s.Run.RunID)
		}
	})
}

// An agent moved through one replica is invoked at its new endpoint by the
// next run another replica starts: the write's notification makes the
// other forget the row it keeps. B's clock is frozen, so only the
// notification can do it.
func TestAgentEditReachesOtherReplica(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stA, stB := testdb.OpenDSN(t, dsn), testdb.OpenDSN(t, dsn)
	logA := eventlog.New(stA, eventlog.Options{Origin: "a"})
	defer logA.Stop()
	logB := eventlog.New(stB, eventlog.Options{Origin: "b"})
	a := New(logA, Options{InstanceID: "a", Invoker: loopbackInvoker(t), HeartbeatInterval: time.Hour})
	b := New(logB, Options{InstanceID: "b", Invoker: loopbackInvoker(t), HeartbeatInterval: time.Hour})
	for _, m := range []*Manager{a, b} {
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	stop := func() { once.Do(func() { b.Shutdown(ctx); a.Shutdown(ctx); logB.Stop() }) }
	defer stop()
	frozen := time.Now()
	b.agents.Now = func() time.Time { return frozen }
	defer testdb.Listen(dsn, logB.Notified)()

	agentID := "moved-" + time.Now().Format("150405.000000")
	old, oldCalls := countingAgent(t)
	registerAgent(t, a, agentID, old.URL)
	startB := func() {
		t.Helper()
		s, err := b.StartRun(ctx, StartParams{UserID: "u", AgentID: agentID, Message: agent.Message{Role: "user", Content: "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		waitEnded(t, stB, s.Run.RunID)
	}
	startB()
	if oldCalls.Load() != 1 {
		t.Fatalf("the first run through B: %d invokes", oldCalls.Load())
	}

	moved, movedCalls := countingAgent(t)
	registerAgent(t, a, agentID, moved.URL)
	for deadline := time.Now().Add(10 * time.Second); movedCalls.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("B still invokes the agent at its old endpoint (%d runs) after A moved it: the write's notification did not reach B's kept row", oldCalls.Load())
		}
		startB()
	}
}
