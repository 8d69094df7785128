package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// The audit log pages newest first with a (ts, audit_id) cursor, filters by
// actor, action and time, and refuses changes to its rows.
func TestAuditLog(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for i := range 7 {
			actor := "admin"
			if i%2 == 1 {
				actor = "user:alice"
			}
			// Two entries share each ts, so the cursor must break ties by id.
			_, err := s.AuditInsert(ctx, &store.AuditInsertParams{AuditID: fmt.Sprintf("aud_%02d", i), Actor: actor, Action: "tool.put",
				Target: fmt.Sprintf("t%d", i), TS: int64(100 + i/2), Detail: json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`)})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AuditInsert(ctx, &store.AuditInsertParams{AuditID: "aud_x", Actor: "config", Action: "agent.register", TS: 200}); err != nil {
			t.Fatal(err)
		}
		var ids []string
		p := &store.AuditListParams{Action: "tool.put", Limit: 3}
		for {
			page, err := s.AuditList(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page {
				ids = append(ids, e.AuditID)
			}
			if len(page) < p.Limit {
				break
			}
			p.BeforeTS, p.BeforeID = page[len(page)-1].TS, page[len(page)-1].AuditID
		}
		if fmt.Sprint(ids) != "[aud_06 aud_05 aud_04 aud_03 aud_02 aud_01 aud_00]" {
			t.Fatalf("pages = %v", ids)
		}
		got, err := s.AuditList(ctx, &store.AuditListParams{Actor: "user:alice", Since: 101, Until: 102, Limit: 10})
		if err != nil || len(got) != 2 || got[0].AuditID != "aud_05" || got[1].AuditID != "aud_03" {
			t.Fatalf("filtered = %v, %v", got, err)
		}
		all, _ := s.AuditList(ctx, &store.AuditListParams{Limit: 100})
		if len(all) != 8 || all[0].AuditID != "aud_x" || string(all[0].Detail) != "{}" {
			t.Fatalf("all = %+v", all)
		}
		// Append-only: the database refuses to change or remove a row.
		err = s.InTx(ctx, func(tx store.Queries) error {
			_, err := tx.AuditList(ctx, &store.AuditListParams{Limit: 1})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := testdb.Exec(t, s, `UPDATE audit SET actor = 'x'`); err == nil {
			t.Fatal("an audit row was updated")
		}
		if err := testdb.Exec(t, s, `DELETE FROM audit`); err == nil {
			t.Fatal("audit rows were deleted")
		}
	})
}

// User keys are found by hash and revoked by deletion; a rotated agent key
// is found while its grace period lasts.
func TestUserKeysAndAgentKeyGrace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for i, k := range []*store.UserKey{{KeyID: "k1", UserID: "alice", KeyHash: "h1", CreatedAt: 1}, {KeyID: "k2", UserID: "alice", KeyHash: "h2", CreatedAt: 2}, {KeyID: "k3", UserID: "bob", KeyHash: "h3", CreatedAt: 3}} {
			if err := s.UserKeyInsert(ctx, k); err != nil {
				t.Fatalf("insert %d: %v", i, err)
			}
		}
		if err := s.UserKeyInsert(ctx, &store.UserKey{KeyID: "k4", UserID: "carol", KeyHash: "h1", CreatedAt: 4}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("same hash twice: %v", err)
		}
		list, err := s.UserKeyList(ctx, "alice")
		if err != nil || len(list) != 2 || list[0].KeyID != "k1" || list[1].KeyID != "k2" {
			t.Fatalf("list = %v, %v", list, err)
		}
		if k, err := s.UserKeyGetByHash(ctx, "h2"); err != nil || k.UserID != "alice" || k.KeyID != "k2" {
			t.Fatalf("by hash = %v, %v", k, err)
		}
		if _, err := s.UserKeyDelete(ctx, "bob", "k2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete another user's key: %v", err)
		}
		if k, err := s.UserKeyDelete(ctx, "alice", "k2"); err != nil || k.KeyHash != "h2" {
			t.Fatalf("delete = %v, %v", k, err)
		}
		if _, err := s.UserKeyGetByHash(ctx, "h2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted key found: %v", err)
		}

		if err := s.AgentKeyGraceSet(ctx, &store.AgentKeyGraceParams{KeyHash: "old", AgentID: "a1", ExpiresAt: 1000, At: 10}); err != nil {
			t.Fatal(err)
		}
		if id, exp, err := s.AgentKeyGraceGet(ctx, "old", 999); err != nil || id != "a1" || exp != 1000 {
			t.Fatalf("in grace = %q %d %v", id, exp, err)
		}
		if _, _, err := s.AgentKeyGraceGet(ctx, "old", 1000); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after grace: %v", err)
		}
		// A later rotation forgets the expired ones.
		if err := s.AgentKeyGraceSet(ctx, &store.AgentKeyGraceParams{KeyHash: "newer", AgentID: "a1", ExpiresAt: 5000, At: 2000}); err != nil {
			t.Fatal(err)
		}
		if n := testdb.Count(t, s, `SELECT COUNT(*) FROM agent_key_grace`); n != 1 {
			t.Fatalf("grace rows = %d, want the expired one gone", n)
		}
		if err := s.AgentKeyGraceDelete(ctx, "a1"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.AgentKeyGraceGet(ctx, "newer", 2001); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted agent's grace key: %v", err)
		}
	})
}

// A shared token bucket starts full, grants whole tokens up to what it
// holds, refills with time, and never grants more than its size to
// concurrent takers.
func TestRateTake(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		take := func(key string, want float64, at int64) *store.RateTaken {
			t.Helper()
			got, err := s.RateTake(ctx, &store.RateTakeParams{Key: key, Rate: 2, Burst: 5, Want: want, At: at})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		if got := take("k", 3, 1000); got.Granted != 3 || got.Tokens != 2 {
			t.Fatalf("first take = %+v", got)
		}
		if got := take("k", 3, 1000); got.Granted != 2 || got.Tokens != 0 {
			t.Fatalf("second take = %+v", got)
		}
		if got := take("k", 1, 1250); got.Granted != 0 || got.Tokens != 0.5 {
			t.Fatalf("a quarter second later = %+v (2/s refills half a token)", got)
		}
		if got := take("k", 1, 1500); got.Granted != 1 || got.Tokens != 0 {
			t.Fatalf("half a second later = %+v", got)
		}
		// A clock behind the bucket's adds nothing (and does not go back).
		if got := take("k", 1, 900); got.Granted != 0 {
			t.Fatalf("an earlier clock = %+v", got)
		}
		if got := take("k", 10, 60_000); got.Granted != 5 || got.Tokens != 0 {
			t.Fatalf("long after = %+v, want capped at the burst", got)
		}
		// Concurrent takers share the burst exactly.
		var mu sync.Mutex
		total := 0.0
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := s.RateTake(ctx, &store.RateTakeParams{Key: "race", Rate: 0.001, Burst: 7, Want: 1, At: 5000})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += got.Granted
				mu.Unlock()
			}()
		}
		wg.Wait()
		if total != 7 {
			t.Fatalf("20 concurrent takers got %v tokens of a bucket of 7", total)
		}
		if n, err := s.RateBucketsPrune(ctx, 6000); err != nil || n != 1 {
			t.Fatalf("prune = %d, %v (the race bucket is idle)", n, err)
		}
	})
}

// WebSocket connections per user: concurrent admissions never exceed the
// cap, a process's connections stop counting when its heartbeat is stale,
// and leaving frees a place.
func TestUserConnectionAdmit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for _, in := range []string{"p1", "p2"} {
			if err := s.InstanceHeartbeat(ctx, in, 1000); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, _, err := s.UserConnectionAdmit(ctx, &store.UserConnectionAdmitParams{UserID: "u", InstanceID: []string{"p1", "p2"}[i%2], Max: 5, AliveSince: 500, At: 1000})
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if admitted != 5 {
			t.Fatalf("admitted %d connections under a cap of 5", admitted)
		}
		// p2 goes stale: its connections stop counting for p1.
		ok, n, err := s.UserConnectionAdmit(ctx, &store.UserConnectionAdmitParams{UserID: "u", InstanceID: "p1", Max: 5, AliveSince: 1001, At: 1002})
		if err != nil || !ok {
			t.Fatalf("after p2 went stale: %v %d %v", ok, n, err)
		}
		if err := s.UserConnectionLeave(ctx, "u", "p1"); err != nil {
			t.Fatal(err)
		}
		if err := s.UserConnectionsDeleteInstance(ctx, "p2"); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if err := s.UserConnectionLeave(ctx, "u", "p1"); err != nil {
				t.Fatal(err)
			}
		}
		if n := testdb.Count(t, s, `SELECT COUNT(*) FROM user_connections`); n != 0 {
			t.Fatalf("%d rows left after every connection left", n)
		}
	})
}
