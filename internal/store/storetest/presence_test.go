package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// Client presence (DESIGN §8): a session has a client while some live
// process records connections following it.
func TestSessionClients(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		has := func(q store.Queries, sessionID string, aliveSince int64) bool {
			t.Helper()
			ok, err := q.SessionHasClient(ctx, sessionID, aliveSince)
			if err != nil {
				t.Fatalf("has client %s: %v", sessionID, err)
			}
			return ok
		}
		set := func(sessionID, instanceID string, n int, at int64) {
			t.Helper()
			if err := s.SessionClientsSet(ctx, sessionID, instanceID, n, at); err != nil {
				t.Fatalf("set %s/%s to %d: %v", sessionID, instanceID, n, err)
			}
		}
		heartbeat := func(instanceID string, at int64) {
			t.Helper()
			if err := s.InstanceHeartbeat(ctx, instanceID, at); err != nil {
				t.Fatal(err)
			}
		}
		heartbeat("a", 100)
		heartbeat("b", 200)

		if has(s, "ses1", 0) {
			t.Fatal("a session nobody connected to has a client")
		}
		set("ses1", "a", 1, 100)
		if !has(s, "ses1", 100) {
			t.Fatal("a connection of a live process does not count")
		}
		if has(s, "ses1", 101) {
			t.Fatal("a connection of a process whose heartbeat is stale still counts")
		}
		if has(s, "ses2", 0) {
			t.Fatal("one session's client counts for another")
		}

		// Another process's connection keeps the session online while the
		// first one's heartbeat is stale; an upsert replaces the count.
		set("ses1", "b", 1, 200)
		set("ses1", "b", 3, 201)
		if !has(s, "ses1", 150) {
			t.Fatal("the live process's connection does not count")
		}
		set("ses1", "b", 0, 202)
		if has(s, "ses1", 150) {
			t.Fatal("zero connections still count")
		}
		set("ses1", "b", 0, 203) // clearing twice is harmless
		set("ses1", "a", 2, 204)
		set("ses1", "a", 0, 205)
		if has(s, "ses1", 0) {
			t.Fatal("an updated row was not the one cleared")
		}

		// A process that never heartbeat has no live connections.
		set("ses3", "ghost", 1, 100)
		if has(s, "ses3", 0) {
			t.Fatal("a connection of an unknown process counts")
		}

		// A restarted process drops its old rows, and only its own.
		set("ses1", "a", 1, 300)
		set("ses2", "a", 1, 300)
		set("ses2", "b", 1, 300)
		if err := s.SessionClientsDeleteInstance(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if has(s, "ses1", 0) || !has(s, "ses2", 0) {
			t.Fatal("dropping one process's rows dropped the wrong ones")
		}
		if err := s.SessionClientsDeleteInstance(ctx, "nobody"); err != nil {
			t.Fatalf("dropping the rows of a process with none: %v", err)
		}

		// The tool service asks inside its write transaction (on SQLite the
		// only writer connection): the answer comes from the transaction
		// and sees what it wrote.
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := s.InTx(tctx, func(tx store.Queries) error {
			if !has(tx, "ses2", 0) || has(tx, "ses4", 0) {
				t.Error("presence read in a transaction differs")
			}
			if err := tx.SessionClientsSet(tctx, "ses4", "b", 1, 400); err != nil {
				return err
			}
			if !has(tx, "ses4", 0) {
				t.Error("a transaction does not see its own presence write")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !has(s, "ses4", 0) {
			t.Fatal("a committed presence write is not seen")
		}
	})
}
