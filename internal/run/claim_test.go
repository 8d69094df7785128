package run

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// openTwice opens one fresh database twice, as two processes would.
func openTwice(t *testing.T, dialect string) (store.Store, store.Store) {
	t.Helper()
	dsn := testdb.DSN(t, dialect)
	return testdb.OpenDSN(t, dsn), testdb.OpenDSN(t, dsn)
}

// manager makes a Manager for instance on st (not started).
func manager(t *testing.T, st store.Store, instance string, inv Invoker) *Manager {
	t.Helper()
	log := eventlog.New(st, eventlog.Options{Origin: instance})
	t.Cleanup(log.Stop)
	return New(log, Options{InstanceID: instance, Invoker: inv, HeartbeatInterval: 50 * time.Millisecond, SweepInterval: time.Hour})
}

// A second process with the instance id of a live one refuses to start,
// naming the setting to change; once the first stops cleanly, the id is
// free at once (issue 8, item 12).
func TestStartRefusesTheInstanceIDOfALiveProcess(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st1, st2 := openTwice(t, dialect)
		ctx := context.Background()
		m1 := manager(t, st1, "same", &agent.Client{})
		if err := m1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		m2 := manager(t, st2, "same", &agent.Client{})
		err := m2.Start(ctx)
		if !errors.Is(err, ErrInstanceInUse) || !strings.Contains(err.Error(), "AGENTPLANE_INSTANCE_ID") {
			t.Fatalf("second process with a live instance id: %v, want ErrInstanceInUse naming AGENTPLANE_INSTANCE_ID", err)
		}
		m1.Shutdown(ctx)
		m3 := manager(t, st2, "same", &agent.Client{})
		m3.opts.ClaimWait = time.Hour // a clean stop released the id: no waiting
		if err := m3.Start(ctx); err != nil {
			t.Fatalf("start after the holder stopped: %v", err)
		}
		m3.Shutdown(ctx)
	})
}

// A process that died a moment ago (fresh heartbeat, no more beats) is
// taken over after watching its heartbeat, and its runs are failed: a
// crash and a quick restart still recover.
func TestStartTakesOverTheInstanceIDOfADeadProcess(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		if _, err := st.InstanceClaim(ctx, &store.InstanceClaimParams{InstanceID: "me", Process: "crashed", At: now, AliveSince: now}); err != nil {
			t.Fatal(err)
		}
		sid := ids.New("ses")
		st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: now})
		r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "me", StartedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		m := manager(t, st, "me", &agent.Client{})
		if err := m.Start(ctx); err != nil {
			t.Fatalf("start after a crash: %v", err)
		}
		defer m.Shutdown(ctx)
		if got, _ := st.RunGet(ctx, r.RunID); got.Status != store.RunFailed {
			t.Fatalf("the crashed process's run is %s, want FAILED", got.Status)
		}
		if in, err := st.InstanceGet(ctx, "me"); err != nil || in.Process != m.opts.Process {
			t.Fatalf("instance after the take-over: %+v, %v", in, err)
		}
	})
}
