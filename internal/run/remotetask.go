package run

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// remoteRef is the remote A2A task and context a run recorded last (its
// a2a_remote_task event).
type remoteRef struct {
	taskID, contextID string
}

// maxRemoteRefs bounds the remote tasks kept in memory; past it the cache
// starts empty again and misses read the log.
const maxRemoteRefs = 4096

// remoteRefs keeps the remote task of runs this process drove to their end,
// so the next run of the session — which continues that task or joins its
// context — need not read it back from the log (issue 10: a read on every
// A2A run's path). Only ended runs are kept: their events no longer change,
// so an entry is never stale, and a run that ended anywhere else is read
// from the log as before.
type remoteRefs struct {
	mu sync.Mutex
	m  map[string]remoteRef
}

func (c *remoteRefs) put(runID string, ref remoteRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxRemoteRefs {
		c.m = map[string]remoteRef{}
	}
	c.m[runID] = ref
}

func (c *remoteRefs) get(runID string) (remoteRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref, ok := c.m[runID]
	return ref, ok
}

// remoteTask returns the remote A2A task and context run recorded (its
// last a2a_remote_task event); empty when none.
func (m *Manager) remoteTask(ctx context.Context, sessionID, runID string) (taskID, contextID string) {
	if ref, ok := m.remote.get(runID); ok {
		return ref.taskID, ref.contextID
	}
	evs, err := m.st.EventsList(ctx, &store.EventsListParams{SessionID: sessionID, RunID: runID, Type: eventlog.TypeA2ARemoteTask, Limit: 1000})
	if err != nil || len(evs) == 0 {
		return "", ""
	}
	var p struct {
		TaskID    string `json:"task_id"`
		ContextID string `json:"context_id"`
	}
	_ = json.Unmarshal(evs[len(evs)-1].Payload, &p)
	return p.TaskID, p.ContextID
}
