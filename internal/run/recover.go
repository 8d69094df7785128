package run

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentplane/agentplane/internal/store"
)

// failOrphans fails runs nobody drives any more with platform_restarted:
// at start, those a previous process with our instance id left; always,
// those of instances whose heartbeat went stale. The guarded transition
// makes concurrent sweepers on several replicas harmless.
func (m *Manager) failOrphans(ctx context.Context, atStart bool) (int, error) {
	instances, err := m.st.InstanceList(ctx)
	if err != nil {
		return 0, err
	}
	alive := map[string]bool{}
	cutoff := m.now() - m.opts.StaleAfter.Milliseconds()
	for _, in := range instances {
		alive[in.InstanceID] = in.HeartbeatAt >= cutoff
	}
	runs, err := m.st.RunListActive(ctx, &storeListAll)
	if err != nil {
		return 0, err
	}
	// Deepest first: an orphaned child fails platform_restarted itself (and
	// settles its caller's tool call) before its orphaned parent's end
	// would cancel it as parent_ended.
	slices.SortStableFunc(runs, func(a, b *store.Run) int { return cmp.Compare(b.Depth, a.Depth) })
	failed := 0
	for _, r := range runs {
		if r.Status == store.RunQueued {
			continue // nobody drives a queued run: it waits for any process to admit it
		}
		if r.Owner == m.opts.InstanceID {
			m.mu.Lock()
			_, driving := m.active[r.RunID]
			m.mu.Unlock()
			if !atStart || driving {
				continue
			}
		} else if alive[r.Owner] {
			continue
		}
		msg := fmt.Sprintf("the agentplane process driving this run (%s) stopped before it finished", r.Owner)
		ended, err := m.failEnded(ctx, r, "platform_restarted", msg, nil)
		if err != nil {
			return failed, err
		}
		if !slices.ContainsFunc(ended, func(e *store.Run) bool { return e.RunID == r.RunID }) {
			continue // it ended meanwhile, here or on another replica: not ours to settle
		}
		m.opts.Logger.Warn("failed orphaned run", "run_id", r.RunID, "session_id", r.SessionID, "owner", r.Owner)
		m.cancelOrphanedRemoteTask(ctx, r)
		failed++
	}
	return failed, nil
}

// remoteTaskCanceller is what an Invoker that reaches remote A2A agents
// offers (a2aremote.Invoker): tasks/cancel for a task by id.
type remoteTaskCanceller interface {
	CancelRemoteTask(ctx context.Context, card json.RawMessage, taskID, runID, sessionID string) error
}

// cancelOrphanedRemoteTask sends tasks/cancel for the remote task of an
// A2A run failed as an orphan: the process that drove it would have, had
// it not died (API.md: a run that ends while its remote task runs cancels
// it). Best effort, in the background: the remote may be gone too, or
// its task over. Shutdown waits for it (remoteCancels), or the process
// could exit mid-send and leave the remote task running.
func (m *Manager) cancelOrphanedRemoteTask(ctx context.Context, r *store.Run) {
	rc, ok := m.opts.Invoker.(remoteTaskCanceller)
	if !ok {
		return
	}
	ag, err := m.Agent(ctx, r.AgentID)
	if err != nil || ag.Protocol != store.ProtocolA2A {
		return
	}
	taskID, _ := m.remoteTask(ctx, r.SessionID, r.RunID)
	if taskID == "" {
		return
	}
	m.remoteCancels.Add(1)
	go func() {
		defer m.remoteCancels.Done()
		if err := rc.CancelRemoteTask(context.WithoutCancel(ctx), ag.A2ACard, taskID, r.RunID, r.SessionID); err != nil {
			m.opts.Logger.Info("could not cancel an orphaned run's remote task", "run_id", r.RunID, "agent_id", r.AgentID, "task_id", taskID, "err", err)
		}
	}()
}
