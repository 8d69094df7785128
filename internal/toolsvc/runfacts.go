package toolsvc

import (
	"context"
	"sync"

	"github.com/agentplane/agentplane/internal/store"
)

// runFactsMax bounds the runs whose facts are kept; past it, a quarter is
// forgotten (any quarter: a forgotten run is read again on its next call).
const runFactsMax = 4096

// runFacts keeps what never changes about a run — its session, agent,
// user, parent, root, depth and intention — so that a tool call need not
// read the run before its transaction: after a run's first call, one
// statement (a round trip on PostgreSQL) fewer per call (issue 13). What
// does change, the run's status, is read under the run's lock inside the
// call's transaction, as before.
type runFacts struct {
	mu sync.Mutex
	m  map[string]*store.Run
}

// get returns runID's facts (Status and everything else that changes left
// empty), or nil.
func (f *runFacts) get(runID string) *store.Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[runID]
}

// put remembers r's facts and returns them.
func (f *runFacts) put(r *store.Run) *store.Run {
	facts := &store.Run{RunID: r.RunID, SessionID: r.SessionID, AgentID: r.AgentID, ParentRunID: r.ParentRunID,
		RootRunID: r.RootRunID, Depth: r.Depth, UserID: r.UserID, StartedAt: r.StartedAt, ToolCallID: r.ToolCallID,
		IntentionID: r.IntentionID}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]*store.Run{}
	}
	if len(f.m) >= runFactsMax {
		n := runFactsMax / 4
		for id := range f.m {
			delete(f.m, id)
			if n--; n == 0 {
				break
			}
		}
	}
	f.m[r.RunID] = facts
	return facts
}

// drop forgets runID (its run is gone: a purged session).
func (f *runFacts) drop(runID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, runID)
}

// RunFacts returns what never changes about runID — its agent, session,
// user, parent, root, depth and intention; not its status — read from the
// store on first use and then kept (store.ErrNotFound: no such run).
func (s *Service) RunFacts(ctx context.Context, runID string) (*store.Run, error) {
	if r := s.runs.get(runID); r != nil {
		return r, nil
	}
	r, err := s.st.RunGet(ctx, runID)
	if err != nil {
		return nil, err
	}
	return s.runs.put(r), nil
}
