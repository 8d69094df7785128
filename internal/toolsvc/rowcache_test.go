package toolsvc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
)

// A tool edited through one replica applies to the next call through
// another at once: the edit's notification makes the other forget the row
// it keeps. B's clock is frozen, so only the notification can do it.
func TestToolEditReachesOtherReplica(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stA, stB := testdb.OpenDSN(t, dsn), testdb.OpenDSN(t, dsn)
	logA := eventlog.New(stA, eventlog.Options{Origin: "a"})
	defer logA.Stop()
	logB := eventlog.New(stB, eventlog.Options{Origin: "b"})
	defer logB.Stop()
	a := New(logA, Options{SweepInterval: time.Hour})
	defer a.Stop()
	b := New(logB, Options{SweepInterval: time.Hour})
	defer b.Stop()
	frozen := time.Now()
	b.registry.rows.Now = func() time.Time { return frozen }

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
