package run

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// heldCanceller is an Invoker reaching a remote A2A agent whose tasks/cancel
// hangs until the test lets it answer.
type heldCanceller struct {
	started  chan string // the task id, when tasks/cancel is sent
	release  chan struct{}
	returned atomic.Bool
}

func (c *heldCanceller) Invoke(context.Context, string, agent.InvokeRequest, func(agent.StreamEvent) error) (*agent.Result, error) {
	return nil, errors.New("not invoked here")
}

func (c *heldCanceller) CancelRemoteTask(_ context.Context, _ json.RawMessage, taskID, _, _ string) error {
	c.started <- taskID
	<-c.release
	c.returned.Store(true)
	return nil
}

// startWithOrphanedRemoteTask records an A2A run of a dead process whose
// remote task is running (its a2a_remote_task event, as the run loop
// writes it) and starts a Manager, whose sweep fails the run and sends
// tasks/cancel through inv.
func startWithOrphanedRemoteTask(t *testing.T, dialect string, inv *heldCanceller) *Manager {
	st := testdb.Open(t, dialect)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	if _, err := st.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "remote", Name: "remote", Endpoint: "http://127.0.0.1:1",
		Capabilities: json.RawMessage(`[]`), LinkedAgents: json.RawMessage(`[]`), At: now,
		Protocol: store.ProtocolA2A, A2ACard: json.RawMessage(`{"name":"remote","url":"http://127.0.0.1:1/a2a"}`)}); err != nil {
		t.Fatal(err)
	}
	sid := ids.New("ses")
	st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: now})
	r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "remote", Owner: "dead", StartedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	log := eventlog.New(st, eventlog.Options{})
	t.Cleanup(log.Stop)
	payload, _ := json.Marshal(map[string]string{"agent_id": "remote", "task_id": "task-1", "context_id": "ctx-1"})
	if _, err := log.Append(ctx, store.EventParams{SessionID: sid, RunID: r.RunID, TS: now, Type: eventlog.TypeA2ARemoteTask, Payload: payload, IfRunActive: true}); err != nil {
		t.Fatal(err)
	}
	m := New(log, Options{InstanceID: "me", Invoker: inv, HeartbeatInterval: time.Hour})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.RunGet(ctx, r.RunID); got.Status != store.RunFailed {
		t.Fatalf("orphan is %s, want failed", got.Status)
	}
	select {
	case id := <-inv.started:
		if id != "task-1" {
			t.Fatalf("tasks/cancel for %q, want task-1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tasks/cancel was never sent for the orphan's remote task")
	}
	return m
}

// TestShutdownWaitsForOrphanRemoteCancel: the tasks/cancel the orphan sweep
// sends is not cut off by Shutdown (the process exiting right after), so
// the remote task is cancelled; but a remote that does not answer holds
// Shutdown no longer than the caller's grace.
func TestShutdownWaitsForOrphanRemoteCancel(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		t.Run("waits", func(t *testing.T) {
			inv := &heldCanceller{started: make(chan string, 1), release: make(chan struct{})}
			m := startWithOrphanedRemoteTask(t, dialect, inv)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() { m.Shutdown(ctx); close(done) }()
			select {
			case <-done:
				t.Fatal("Shutdown returned while the orphan's tasks/cancel was still in flight")
			case <-time.After(300 * time.Millisecond):
			}
			close(inv.release)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Shutdown did not return once tasks/cancel had")
			}
			if !inv.returned.Load() {
				t.Fatal("Shutdown returned before tasks/cancel did")
			}
		})
		t.Run("bounded by ctx", func(t *testing.T) {
			inv := &heldCanceller{started: make(chan string, 1), release: make(chan struct{})}
			t.Cleanup(func() { close(inv.release) })
			m := startWithOrphanedRemoteTask(t, dialect, inv)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := make(chan struct{})
			go func() { m.Shutdown(ctx); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a remote that never answers tasks/cancel held Shutdown past its ctx")
			}
			if inv.returned.Load() {
				t.Fatal("tasks/cancel returned though it was held")
			}
		})
	})
}
