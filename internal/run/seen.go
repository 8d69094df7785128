package run

import (
	"context"
	"sync"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// seenSessionsMax bounds how many sessions' newest runs a process keeps.
const seenSessionsMax = 10_000

// seenSessions is what this process saw last of sessions it started root
// runs in: each one's user and newest root run, as it started and, if it
// saw it, ended. A run's start in such a session need not read them first
// on a store that can check them instead (store.SessionAssumer): the
// check fails the start's transaction if anything changed — another
// process started or ended a run there, the run was cancelled, the session
// is being deleted — and the start runs again, reading first. So what is
// kept here is never trusted, only used to skip a round trip when right.
type seenSessions struct {
	mu sync.Mutex
	m  map[string]seenSession
}

type seenSession struct {
	userID string
	run    store.Run // the newest root run, as last seen
}

// started records r, just committed, as its session's newest root run.
func (s *seenSessions) started(userID string, r *store.Run) {
	if r.ParentRunID != "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]seenSession{}
	}
	if _, ok := s.m[r.SessionID]; !ok && len(s.m) >= seenSessionsMax {
		for k := range s.m { // any one: a miss costs a read, not a wrong answer
			delete(s.m, k)
			break
		}
	}
	s.m[r.SessionID] = seenSession{userID: userID, run: *r}
}

// ended records the end of runs, just committed, where one is its
// session's newest root run as seen.
func (s *seenSessions) ended(runs []*store.Run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range runs {
		if cur, ok := s.m[r.SessionID]; ok && cur.run.RunID == r.RunID {
			cur.run = *r
			s.m[r.SessionID] = cur
		}
	}
}

// assume stands in for the start's read of sessionID and its newest run by
// latest (SessionGetForRunLatest) where this process saw them last, the
// store can check them without waiting, and the log lets the start assume
// (eventlog.Assume): it returns the session and the run as seen (ok).
func (s *seenSessions) assume(ctx context.Context, tx store.Queries, sessionID, userID string, latest *store.RunLatestParams) (*store.Session, *store.Run, bool, error) {
	if latest == nil || latest.IntentionID != "" {
		return nil, nil, false, nil
	}
	s.mu.Lock()
	seen, ok := s.m[sessionID]
	s.mu.Unlock()
	// Only the newest root run is kept: it answers for the newest run of
	// an agent only if it is that agent's (a newer child of the agent in
	// the session would fail the check).
	if !ok || seen.userID != userID || (latest.AgentID != "" && seen.run.AgentID != latest.AgentID) {
		return nil, nil, false, nil
	}
	a, ok := tx.(store.SessionAssumer)
	if !ok || !eventlog.Assume(ctx) {
		return nil, nil, false, nil
	}
	if err := a.AssumeSessionForRun(ctx, sessionID, userID, latest, seen.run.RunID, seen.run.Status); err != nil {
		return nil, nil, false, err
	}
	r := seen.run
	return &store.Session{SessionID: sessionID, UserID: userID}, &r, true, nil
}
