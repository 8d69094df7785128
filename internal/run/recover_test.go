package run

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// Runs are failed only when their owner is gone: a previous incarnation of
// this instance, or an instance whose heartbeat went stale. Another live
// replica's runs are left alone.
func TestOrphanSweepRespectsLiveReplicas(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		st.InstanceHeartbeat(ctx, "alive", now)
		st.InstanceHeartbeat(ctx, "stale", now-time.Hour.Milliseconds())
		runOf := map[string]string{}
		for _, owner := range []string{"me", "alive", "stale", "never-seen"} {
			sid := ids.New("ses")
			st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: now})
			r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: owner, StartedAt: now})
			if err != nil {
				t.Fatal(err)
			}
			runOf[owner] = r.RunID
		}
		log := eventlog.New(st, eventlog.Options{})
		defer log.Stop()
		m := New(log, Options{InstanceID: "me", Invoker: &agent.Client{}, HeartbeatInterval: time.Hour})
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown(ctx)
		for owner, want := range map[string]string{"me": store.RunFailed, "alive": store.RunRunning, "stale": store.RunFailed, "never-seen": store.RunFailed} {
			r, _ := st.RunGet(ctx, runOf[owner])
			if r.Status != want {
				t.Errorf("run of %s is %s, want %s", owner, r.Status, want)
			}
			if want == store.RunFailed {
				evs, _ := st.EventsList(ctx, &store.EventsListParams{RunID: r.RunID})
				if len(evs) != 1 || evs[0].Type != eventlog.TypeRunFailed || string(r.Error) == "" {
					t.Errorf("failed run of %s: events %v error %s", owner, evs, r.Error)
				}
			}
		}
		// A second sweep (another replica doing the same) changes nothing.
		n, err := m.failOrphans(ctx, false)
		if err != nil || n != 0 {
			t.Fatalf("second sweep failed %d runs: %v", n, err)
		}
	})
}
