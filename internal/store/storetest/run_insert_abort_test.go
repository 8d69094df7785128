package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// RunInsertOrAbort returns the row as the store keeps it; its conflicts —
// the session's active root run, a second answer to one run — fail the
// whole transaction with ErrConflict, whether the INSERT's error came back
// at once (SQLite) or with the commit (PostgreSQL's pipeline), and nothing
// the transaction wrote after it is kept.
func TestRunInsertOrAbort(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		insert := func(resumes string, after func(tx store.Queries) error) (*store.Run, error) {
			var r *store.Run
			err := s.InTx(ctx, func(tx store.Queries) error {
				var err error
				r, err = tx.RunInsertOrAbort(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", UserID: "u1",
					Owner: "i1", StartedAt: 5, IntentionID: ids.New("int"), ResumesRunID: resumes})
				if err != nil {
					return err
				}
				return after(tx)
			})
			return r, err
		}
		none := func(store.Queries) error { return nil }

		first, err := insert("", none)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := s.RunGet(ctx, first.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, stored) {
			t.Fatalf("returned %+v\nstored   %+v", first, stored)
		}

		// The session is busy: a message written after the refused insert,
		// in its transaction, must not be kept.
		msgID := ids.New("msg")
		_, err = insert("", func(tx store.Queries) error {
			_, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: msgID, SessionID: sid, Role: "user", Content: "lost", CreatedAt: 6})
			return err
		})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second active root run: %v, want ErrConflict", err)
		}
		msgs, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid, Limit: 10})
		if err != nil || len(msgs) != 0 {
			t.Fatalf("the refused start's message was kept: %v %v", msgs, err)
		}

		// One run answered twice: the second answer is refused the same way.
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: first.RunID, Status: store.RunInputRequired, At: 7,
			From: []string{store.RunRunning}}); err != nil {
			t.Fatal(err)
		}
		answer, err := insert(first.RunID, none)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: answer.RunID, Status: store.RunDone, At: 8,
			From: []string{store.RunRunning}}); err != nil {
			t.Fatal(err)
		}
		if _, err := insert(first.RunID, none); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second answer to one run: %v, want ErrConflict", err)
		}
		if _, err := s.RunInsertOrAbort(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: first.RunID, Owner: "i1", StartedAt: 9}); err == nil {
			t.Fatal("a child run was inserted by RunInsertOrAbort")
		}
	})
}
