package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// AssumeSessionForRun (PostgreSQL) lets a transaction go on when the
// session is as seen — its user's, not being purged, its newest run (by
// root-ness and agent, as RunLatest finds it) the one seen with the status
// seen — and fails it with ErrSessionMoved otherwise, keeping nothing.
func TestAssumeSessionForRun(t *testing.T) {
	s := testdb.Open(t, "postgres")
	ctx := context.Background()
	sid, root := newRun(t, s) // user u1, agent a1, root, RUNNING, started at 1
	child := insertRun(t, s, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a2", ParentRunID: root, RootRunID: root, Depth: 1, StartedAt: 2})
	_, other := newRun(t, s) // another session's run
	assume := func(userID string, latest *store.RunLatestParams, runID, status string) error {
		t.Helper()
		msgID := ids.New("msg")
		err := s.InTx(ctx, func(tx store.Queries) error {
			a, ok := tx.(store.SessionAssumer)
			if !ok {
				t.Fatal("a PostgreSQL transaction does not offer AssumeSessionForRun")
			}
			if err := a.AssumeSessionForRun(ctx, sid, userID, latest, runID, status); err != nil {
				return err
			}
			_, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: msgID, SessionID: sid, Role: "user", Content: "x", CreatedAt: 3})
			return err
		})
		if kept := messageKept(t, s, sid, msgID); kept != (err == nil) {
			t.Fatalf("transaction %v, its message kept: %v", err, kept)
		}
		return err
	}
	roots := &store.RunLatestParams{SessionID: sid, RootOnly: true}
	ofA2 := &store.RunLatestParams{SessionID: sid, AgentID: "a2"}
	for _, ok := range []struct {
		latest        *store.RunLatestParams
		runID, status string
	}{
		{roots, root, store.RunRunning},
		{ofA2, child.RunID, store.RunRunning},
		{&store.RunLatestParams{SessionID: sid}, child.RunID, store.RunRunning},
	} {
		if err := assume("u1", ok.latest, ok.runID, ok.status); err != nil {
			t.Fatalf("as seen (%+v %s %s): %v", ok.latest, ok.runID, ok.status, err)
		}
	}
	for what, moved := range map[string]func() error{
		"another user":       func() error { return assume("u2", roots, root, store.RunRunning) },
		"another newest run": func() error { return assume("u1", &store.RunLatestParams{SessionID: sid}, root, store.RunRunning) },
		"another status":     func() error { return assume("u1", roots, root, store.RunDone) },
		"no run of the agent": func() error {
			return assume("u1", &store.RunLatestParams{SessionID: sid, AgentID: "a3"}, root, store.RunRunning)
		},
		"another session's runs": func() error { return assume("u1", roots, other, store.RunRunning) },
	} {
		if err := moved(); !errors.Is(err, store.ErrSessionMoved) {
			t.Fatalf("%s: %v, want ErrSessionMoved", what, err)
		}
	}
	for _, id := range []string{child.RunID, root} {
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: id, From: store.RunActiveStatuses, Status: store.RunDone, At: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if err := assume("u1", roots, root, store.RunDone); err != nil {
		t.Fatalf("as seen, ended: %v", err)
	}
	if err := s.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: sid, Owner: "i1", Reason: "test", At: 5}); err != nil {
		t.Fatal(err)
	}
	if err := assume("u1", roots, root, store.RunDone); !errors.Is(err, store.ErrSessionMoved) {
		t.Fatalf("being purged: %v, want ErrSessionMoved", err)
	}
}
