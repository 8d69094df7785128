package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// SessionGetForRunLatest, in a transaction as a run's start uses it: the
// session and the newest run matching the filter, nil when none matches,
// ErrNotFound for no session — and the transaction goes on either way.
func TestSessionGetForRunLatest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, first := newRun(t, s)
		child := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "b", ParentRunID: first, RootRunID: first, Depth: 1, StartedAt: 3})
		check := func(step string, lp *store.RunLatestParams, want string) {
			t.Helper()
			err := s.InTx(ctx, func(tx store.Queries) error {
				sess, purging, r, err := tx.SessionGetForRunLatest(ctx, sid, lp)
				if err != nil {
					return err
				}
				got := ""
				if r != nil {
					got = r.RunID
				}
				if sess.SessionID != sid || purging || got != want {
					t.Fatalf("%s: session %+v, purging %v, latest %q; want latest %q", step, sess, purging, got, want)
				}
				_, err = tx.RunGet(ctx, first)
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}
		check("root only", &store.RunLatestParams{SessionID: sid, RootOnly: true}, first)
		check("any run", &store.RunLatestParams{SessionID: sid}, child.RunID)
		check("an agent's", &store.RunLatestParams{SessionID: sid, AgentID: "b"}, child.RunID)
		check("no match", &store.RunLatestParams{SessionID: sid, AgentID: "nobody"}, "")

		err := s.InTx(ctx, func(tx store.Queries) error {
			_, _, _, err := tx.SessionGetForRunLatest(ctx, "nope", &store.RunLatestParams{SessionID: "nope", RootOnly: true})
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("no session: %v, want ErrNotFound", err)
			}
			// A run's start creates the session then, in the same
			// transaction.
			_, err = tx.SessionCreate(ctx, &store.SessionCreateParams{SessionID: ids.New("ses"), UserID: "u", CreatedAt: 1})
			return err
		})
		if err != nil {
			t.Fatalf("the transaction after no session: %v", err)
		}
	})
}
