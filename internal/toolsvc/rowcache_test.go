package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
)

// countingStore counts ToolGet reads.
type countingStore struct {
	store.Store
	reads atomic.Int64
}

func (c *countingStore) ToolGet(ctx context.Context, name string) (*store.ToolRow, error) {
	c.reads.Add(1)
	return c.Store.ToolGet(ctx, name)
}

// A tool's row is read once while fresh, absent names too; a write here
// (forget) or the TTL makes the next call read it again, and a read that
// began before a forget is not kept.
func TestToolRowsCache(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: testdb.Open(t, "sqlite")}
	if _, _, err := st.ToolPut(ctx, &store.ToolPutParams{Name: "a", Definition: json.RawMessage(`{"name":"a"}`), At: 1}); err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1000, 0)
	c := &toolRows{now: func() time.Time { return clock }}
	for range 3 {
		if row, err := c.get(ctx, st, "a"); err != nil || row.Name != "a" {
			t.Fatalf("get a: %v, %v", row, err)
		}
		if _, err := c.get(ctx, st, "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
	}
	if n := st.reads.Load(); n != 2 {
		t.Fatalf("%d reads for two names asked three times each, want 2", n)
	}

	// A write, then forget: the next get reads the new row.
	if _, _, err := st.ToolPut(ctx, &store.ToolPutParams{Name: "a", Definition: json.RawMessage(`{"name":"a","description":"v2"}`), At: 2}); err != nil {
		t.Fatal(err)
	}
	c.forget()
	if row, _ := c.get(ctx, st, "a"); row.UpdatedAt != 2 {
		t.Fatalf("after forget: updated_at %d, want 2", row.UpdatedAt)
	}

	// The TTL bounds a missed change.
	if _, _, err := st.ToolPut(ctx, &store.ToolPutParams{Name: "a", Definition: json.RawMessage(`{"name":"a","description":"v3"}`), At: 3}); err != nil {
		t.Fatal(err)
	}
	if row, _ := c.get(ctx, st, "a"); row.UpdatedAt != 2 {
		t.Fatalf("within the TTL: updated_at %d, want the cached 2", row.UpdatedAt)
	}
	clock = clock.Add(toolRowTTL)
	if row, _ := c.get(ctx, st, "a"); row.UpdatedAt != 3 {
		t.Fatalf("past the TTL: updated_at %d, want 3", row.UpdatedAt)
	}

	// A read racing a forget is not kept: the forget lands while the store
	// is being read.
	racing := &forgetDuringRead{Store: st, c: c}
	if _, _, err := st.ToolPut(ctx, &store.ToolPutParams{Name: "b", Definition: json.RawMessage(`{"name":"b"}`), At: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(ctx, racing, "b"); err != nil {
		t.Fatal(err)
	}
	before := st.reads.Load()
	if _, err := c.get(ctx, st, "b"); err != nil {
		t.Fatal(err)
	}
	if st.reads.Load() != before+1 {
		t.Fatal("a row read while a forget happened was kept")
	}
}

type forgetDuringRead struct {
	store.Store
	c *toolRows
}

func (f *forgetDuringRead) ToolGet(ctx context.Context, name string) (*store.ToolRow, error) {
	row, err := f.Store.ToolGet(ctx, name)
	f.c.forget()
	return row, err
}

// A tool edited through one replica applies to the next call through
// another at once: the edit's notification makes the other forget the row
// it keeps. B's clock is frozen, so only the notification can do it.
func TestToolEditReachesOtherReplica(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func() store.Store {
		st, err := postgres.Open(ctx, dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB := open(), open()
	logA := eventlog.New(stA, eventlog.Options{Origin: "a"})
	defer logA.Stop()
	logB := eventlog.New(stB, eventlog.Options{Origin: "b"})
	defer logB.Stop()
	a := New(logA, Options{SweepInterval: time.Hour})
	defer a.Stop()
	b := New(logB, Options{SweepInterval: time.Hour})
	defer b.Stop()
	frozen := time.Now()
	b.registry.rows.now = func() time.Time { return frozen }

	defer testdb.Listen(dsn, logB.Notified)()

	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	put := func(decision string) {
		t.Helper()
		d := tool.Definition{Name: "edited", Kind: tool.KindServer, Endpoint: srv.URL, Policy: tool.Policy{Decision: decision}}
		if _, _, err := a.PutTool(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	put(tool.DecisionAllow)

	sid := ids.New("ses")
	if _, err := stA.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "alice", CreatedAt: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	r, err := stA.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "agent-a", UserID: "alice", Owner: "b", StartedAt: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	invoke := func() *CallView {
		t.Helper()
		v, err := b.Invoke(ctx, InvokeParams{AgentID: "agent-a", RunID: r.RunID, ToolName: "edited", Args: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := invoke(); v.State != store.ToolCallSucceeded {
		t.Fatalf("allowed call through B: %s", v.Status)
	}

	put(tool.DecisionBlock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := invoke()
		if v.State == store.ToolCallBlocked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still calls the tool as allowed (%s) after A blocked it: the edit's notification did not reach B's cached row", v.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sent.Load() < 1 {
		t.Fatal("the allowed call never reached the tool")
	}
}
