package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// On PostgreSQL a pipelined transaction can assert runs active without
// waiting: with active runs it commits; with an ended one it fails with
// ErrRunEnded and keeps nothing it wrote; and like RunsEnded it
// share-locks the runs, so ending one elsewhere waits for its commit.
func TestAssertRunsActive(t *testing.T) {
	s := testdb.Open(t, "postgres")
	ctx := context.Background()
	start := func() *store.Run {
		t.Helper()
		r, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: newSession(t, s), AgentID: "a", Owner: "i1", StartedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	active, ended := start(), start()
	if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: ended.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 2}); err != nil {
		t.Fatal(err)
	}
	assertThenWrite := func(runIDs ...string) (string, error) {
		msgID := ids.New("msg")
		return msgID, s.InTx(ctx, func(tx store.Queries) error {
			a, ok := tx.(store.RunsActiveAsserter)
			if !ok {
				t.Fatal("a PostgreSQL transaction does not offer AssertRunsActive")
			}
			if err := a.AssertRunsActive(ctx, runIDs); err != nil {
				return err
			}
			_, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: msgID, SessionID: active.SessionID, Role: "user", Content: "x", CreatedAt: 3})
			return err
		})
	}
	kept := func(msgID string) bool {
		t.Helper()
		return messageKept(t, s, active.SessionID, msgID)
	}
	if id, err := assertThenWrite(active.RunID); err != nil || !kept(id) {
		t.Fatalf("asserting an active run: %v (message kept: %v)", err, kept(id))
	}
	if id, err := assertThenWrite(active.RunID, ended.RunID); !errors.Is(err, store.ErrRunEnded) || kept(id) {
		t.Fatalf("asserting an ended run: %v, want ErrRunEnded (message kept: %v)", err, kept(id))
	}

	// The share lock: ending the run elsewhere waits for the commit.
	holding, release := make(chan struct{}), make(chan struct{})
	txDone := make(chan error, 1)
	go func() {
		txDone <- s.InTx(ctx, func(tx store.Queries) error {
			if err := tx.(store.RunsActiveAsserter).AssertRunsActive(ctx, []string{active.RunID}); err != nil {
				return err
			}
			if _, err := tx.SessionGet(ctx, active.SessionID); err != nil { // waited for: the assertion has run
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	endDone := make(chan error, 1)
	go func() {
		_, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: active.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 4})
		endDone <- err
	}()
	select {
	case err := <-endDone:
		t.Errorf("the run ended (%v) while a transaction that asserted it active was open", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-txDone; err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	if err := <-endDone; err != nil {
		t.Fatal(err)
	}
}
