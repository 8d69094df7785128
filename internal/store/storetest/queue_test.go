package storetest

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
	"github.com/agentplane/agentplane/internal/testdb"
)

// rootRun inserts a running root run of user in a new session.
func rootRun(t *testing.T, s store.Queries, user string, at int64) *store.Run {
	t.Helper()
	ctx := context.Background()
	sid := ids.New("ses")
	if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: user, CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	r, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", UserID: user, Owner: "i1", StartedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The queue: enqueued root runs are QUEUED, counted as queued (and against
// their user) but not as running, listed first in first out, admitted once
// each by a guarded transition that makes the admitter the owner; their
// session stays busy while queued; a queued run can be cancelled.
func TestRunQueue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		running := rootRun(t, s, "u1", 1)
		var queued []*store.Run
		for i := range 3 {
			r := rootRun(t, s, "u2", int64(10+i))
			if err := s.RunEnqueue(ctx, r.RunID, int64(100-i), i+1); err != nil { // queued_at decides the order, not started_at
				t.Fatal(err)
			}
			queued = append(queued, r)
		}
		if err := s.RunEnqueue(ctx, queued[0].RunID, 5, 1); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("enqueue twice: %v", err)
		}
		if r, _ := s.RunGet(ctx, queued[0].RunID); r.Status != store.RunQueued || store.RunIsTerminal(r.Status) {
			t.Fatalf("queued run = %+v", r)
		}
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: queued[0].SessionID, AgentID: "a", UserID: "u2", Owner: "i1", StartedAt: 20}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second root run in a queued run's session: %v", err)
		}
		nRun, nQueued, err := s.RunQueueCounts(ctx, "")
		if err != nil || nRun != 1 || nQueued != 3 {
			t.Fatalf("counts = %d running %d queued, %v", nRun, nQueued, err)
		}
		if nRun, _, _ := s.RunQueueCounts(ctx, running.RunID); nRun != 0 {
			t.Fatalf("counts without the running run = %d", nRun)
		}
		if n, err := s.RunUserActiveRoots(ctx, "u2", ""); err != nil || n != 3 {
			t.Fatalf("u2's active roots = %d, %v", n, err)
		}
		if n, _ := s.RunUserActiveRoots(ctx, "u2", queued[1].RunID); n != 2 {
			t.Fatalf("u2's active roots but one = %d", n)
		}
		head, err := s.RunQueueHead(ctx, 10)
		if err != nil || len(head) != 3 || head[0].RunID != queued[2].RunID || head[2].RunID != queued[0].RunID || head[0].Position != 3 {
			t.Fatalf("head = %+v, %v", head, err)
		}
		if ok, err := s.RunQueuePositionSet(ctx, head[0].RunID, 3, 1); err != nil || !ok {
			t.Fatalf("position 3 → 1: %v %v", ok, err)
		}
		if ok, _ := s.RunQueuePositionSet(ctx, head[0].RunID, 3, 1); ok {
			t.Fatal("a stale position update applied")
		}
		// Two admitters race for the head: one wins.
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for _, owner := range []string{"p1", "p2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.InTx(ctx, func(tx store.Queries) error {
					if err := tx.RunAdmissionLock(ctx); err != nil {
						return err
					}
					r, err := tx.RunAdmit(ctx, &store.RunAdmitParams{RunID: head[0].RunID, Owner: owner, At: 500})
					if err == nil {
						if r.Status != store.RunRunning || r.Owner != owner || r.StartedAt != 500 {
							t.Errorf("admitted = %+v", r)
						}
						mu.Lock()
						wins++
						mu.Unlock()
					} else if !errors.Is(err, store.ErrConflict) || r.Status != store.RunRunning {
						t.Errorf("losing admit: %+v, %v", r, err)
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d admitters won", wins)
		}
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: head[1].RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 600}); err != nil {
			t.Fatalf("cancel a queued run: %v", err)
		}
		if left, _ := s.RunQueueHead(ctx, 10); len(left) != 1 || left[0].RunID != head[2].RunID {
			t.Fatalf("queue left = %+v", left)
		}
		// Held row locks serialise admissions across connections.
		if err := s.InTx(ctx, func(tx store.Queries) error {
			if err := tx.UserLock(ctx, "u2"); err != nil {
				return err
			}
			return tx.RunAdmissionLock(ctx)
		}); err != nil {
			t.Fatal(err)
		}
		// A QUEUED row needs its queue time and must be a root.
		if err := testdb.Exec(t, s, `UPDATE runs SET queued_at = NULL WHERE status = 'QUEUED'`); err == nil {
			t.Fatal("a queued run without queued_at was accepted")
		}
	})
}

// TestMigrateQueueKeepsData: runs made before the queue (issue 14) keep
// every column through migration 0034 (SQLite rebuilds runs with its
// indexes and foreign keys), and the new status is accepted after.
func TestMigrateQueueKeepsData(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		dsn := testdb.DSN(t, dialect)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var db *sql.DB
		var all fs.FS
		var err error
		if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
			all = sqlite.Migrations()
			db, err = sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(ON)&_pragma=busy_timeout(10000)")
		} else {
			all = postgres.Migrations()
			db, err = sql.Open("pgx", dsn)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		old := fstest.MapFS{}
		names, _ := fs.Glob(all, "migrations/*.sql")
		for _, n := range names {
			if strings.Compare(n, "migrations/0034_queue.sql") < 0 {
				b, _ := fs.ReadFile(all, n)
				old[n] = &fstest.MapFile{Data: b}
			}
		}
		if len(old) == len(names) {
			t.Fatal("no migration 0034_queue")
		}
		if err := migrate.Apply(ctx, db, old, "migrations", dialect == "postgres"); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`INSERT INTO sessions (session_id, user_id, created_at) VALUES ('ses_1', 'u1', 1)`,
			`INSERT INTO runs (run_id, session_id, agent_id, status, owner, started_at, root_run_id) VALUES ('run_1', 'ses_1', 'a', 'RUNNING', 'i1', 1, 'run_1')`,
			`INSERT INTO runs (run_id, session_id, agent_id, parent_run_id, root_run_id, depth, child_key, tool_call_id, status, owner, started_at, ended_at, error)
			 VALUES ('run_2', 'ses_1', 'b', 'run_1', 'run_1', 1, 'k', 'tc_1', 'FAILED', 'i1', 2, 3, '{"code":"x"}')`,
			`INSERT INTO tool_calls (tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, args_hash, deadline_at, timeout_ms, created_at, updated_at)
			 VALUES ('tc_1', 'run_1', 'ses_1', 'a', 'call_b', 'agent', 'RUNNING', '{}', 'h', 100, 1000, 1, 1)`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		db.Close()
		var s store.Store
		if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
			s, err = sqlite.Open(ctx, path)
		} else {
			s, err = postgres.Open(ctx, dsn, postgres.Options{})
		}
		if err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		defer s.Close()
		child, err := s.RunGet(ctx, "run_2")
		if err != nil || child.ParentRunID != "run_1" || child.Depth != 1 || child.ChildKey != "k" || child.ToolCallID != "tc_1" || child.EndedAt != 3 || string(child.Error) != `{"code":"x"}` {
			t.Fatalf("child after upgrade = %+v, %v", child, err)
		}
		if c, err := s.ToolCallGet(ctx, "tc_1"); err != nil || c.RunID != "run_1" {
			t.Fatalf("tool call after upgrade = %+v, %v", c, err)
		}
		if err := testdb.Exec(t, s, `INSERT INTO tool_calls (tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, args_hash, deadline_at, timeout_ms, created_at, updated_at)
			 VALUES ('tc_x', 'run_none', 'ses_1', 'a', 't', 'server', 'RUNNING', '{}', 'h', 100, 1000, 1, 1)`); err == nil {
			t.Fatal("a tool call of a missing run was accepted after the rebuild")
		}
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: "run_3", SessionID: "ses_1", AgentID: "a", Owner: "i1", StartedAt: 4}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("the one-active-root index after the rebuild: %v", err)
		}
		r := rootRun(t, s, "u9", 5)
		if err := s.RunEnqueue(ctx, r.RunID, 5, 1); err != nil {
			t.Fatalf("enqueue after upgrade: %v", err)
		}
	})
}
