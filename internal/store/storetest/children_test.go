package storetest

// Child runs (issue 9, DESIGN §11): the tree columns, idempotent children,
// root-only transcripts, the registration fields and the call_<agent> tool
// kind, on both databases.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
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

func insertRun(t *testing.T, q store.Queries, p *store.RunInsertParams) *store.Run {
	t.Helper()
	if p.RunID == "" {
		p.RunID = ids.New("run")
	}
	if p.Owner == "" {
		p.Owner = "i1"
	}
	r, err := q.RunInsert(context.Background(), p)
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
	return r
}

func runIDs(rs []*store.Run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.RunID
	}
	return out
}

func TestChildRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		root := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "a", UserID: "u1", StartedAt: 1})
		if root.RootRunID != root.RunID || root.Depth != 0 || root.ParentRunID != "" || root.ChildKey != "" {
			t.Fatalf("root = %+v", root)
		}
		child := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "b", UserID: "u1", ParentRunID: root.RunID,
			RootRunID: root.RunID, Depth: 1, StartedAt: 2, ChildKey: "k1", ToolCallID: "tc_1"})
		if child.RootRunID != root.RunID || child.Depth != 1 || child.ChildKey != "k1" || child.ToolCallID != "tc_1" || child.Status != store.RunRunning {
			t.Fatalf("child = %+v", child)
		}
		// The same key in the same parent is the same child.
		dup, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: root.RunID,
			RootRunID: root.RunID, Depth: 1, Owner: "i2", StartedAt: 3, ChildKey: "k1"})
		if !errors.Is(err, store.ErrDuplicate) || errors.Is(err, store.ErrConflict) || dup == nil || dup.RunID != child.RunID {
			t.Fatalf("repeated key: %+v, %v; want the first child with ErrDuplicate", dup, err)
		}
		// Another key, or no key, is another child; children never make
		// the session busy, and an active child does not either.
		other := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "c", ParentRunID: root.RunID, RootRunID: root.RunID, Depth: 1, StartedAt: 4, ChildKey: "k2"})
		nokey1 := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "c", ParentRunID: root.RunID, RootRunID: root.RunID, Depth: 1, StartedAt: 5})
		nokey2 := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "c", ParentRunID: root.RunID, RootRunID: root.RunID, Depth: 1, StartedAt: 6})
		grand := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "d", ParentRunID: child.RunID, RootRunID: root.RunID, Depth: 2, StartedAt: 7, ChildKey: "k1"})
		// A key is scoped to its parent: "k1" under the child is new.
		if grand.ParentRunID != child.RunID || grand.Depth != 2 {
			t.Fatalf("grandchild = %+v", grand)
		}
		// The same id twice is a conflict, not a duplicate.
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: other.RunID, SessionID: sid, AgentID: "c", ParentRunID: root.RunID, RootRunID: root.RunID, Depth: 1, Owner: "i1", StartedAt: 8, ChildKey: "k3"}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("id taken: %v, want ErrConflict", err)
		}

		kids, err := s.RunListChildren(ctx, root.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{child.RunID, other.RunID, nokey1.RunID, nokey2.RunID}; !slices.Equal(runIDs(kids), want) {
			t.Fatalf("children = %v, want %v", runIDs(kids), want)
		}
		if kids, _ := s.RunListChildren(ctx, grand.RunID); len(kids) != 0 {
			t.Fatalf("a leaf has children %v", runIDs(kids))
		}
		if kids, err := s.RunListChildren(ctx, ""); err != nil || len(kids) != 0 {
			t.Fatalf("children of no run: %v, %v", runIDs(kids), err)
		}
		tree, err := s.RunListTree(ctx, root.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{root.RunID, child.RunID, other.RunID, nokey1.RunID, nokey2.RunID, grand.RunID}; !slices.Equal(runIDs(tree), want) {
			t.Fatalf("tree = %v, want %v (by depth, then age)", runIDs(tree), want)
		}
		// Another root in another session has a tree of its own.
		root2 := insertRun(t, s, &store.RunInsertParams{SessionID: newSession(t, s), AgentID: "a", StartedAt: 9})
		if tree, _ := s.RunListTree(ctx, root2.RunID); !slices.Equal(runIDs(tree), []string{root2.RunID}) {
			t.Fatalf("second tree = %v", runIDs(tree))
		}
		// The session still takes no second active root while the first runs.
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "i1", StartedAt: 10}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second root: %v, want ErrConflict", err)
		}
		got, err := s.RunGet(ctx, grand.RunID)
		if err != nil || got.RootRunID != root.RunID || got.Depth != 2 || got.ChildKey != "k1" {
			t.Fatalf("get grandchild = %+v, %v", got, err)
		}
	})
}

// TestChildRunKeyConcurrent: racing starters of one child key, as 20
// retries of one idempotent invoke on several replicas would be, get one
// child between them.
func TestChildRunKeyConcurrent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		root := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "a", StartedAt: 1})
		const n = 20
		var wg sync.WaitGroup
		got := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.InTx(ctx, func(tx store.Queries) error {
					r, err := tx.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: root.RunID,
						RootRunID: root.RunID, Depth: 1, Owner: fmt.Sprint("i", i), StartedAt: 2, ChildKey: "same"})
					if err != nil && !errors.Is(err, store.ErrDuplicate) {
						return err
					}
					got[i] = r.RunID
					return nil
				})
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("starter %d: %v", i, err)
			}
			if got[i] != got[0] {
				t.Fatalf("starters got children %s and %s", got[0], got[i])
			}
		}
		if kids, _ := s.RunListChildren(ctx, root.RunID); len(kids) != 1 {
			t.Fatalf("%d children, want 1", len(kids))
		}
	})
}

func TestMessagesCarryTheirRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		add := func(runID, agentID, parent, content string) {
			if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, RunID: runID, AgentID: agentID,
				ParentRunID: parent, Role: "user", Content: content, CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
		}
		add("run_1", "a", "", "root in")
		add("run_2", "b", "run_1", "child in")
		add("run_2", "b", "run_1", "child out")
		add("run_1", "a", "", "root out")
		all, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid, Limit: 10})
		if err != nil || len(all) != 4 {
			t.Fatalf("all = %v, %v", all, err)
		}
		if m := all[1]; m.RunID != "run_2" || m.AgentID != "b" || m.ParentRunID != "run_1" || m.Content != "child in" {
			t.Fatalf("child row = %+v", m)
		}
		root, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid, Limit: 10, RootOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var contents []string
		for _, m := range root {
			contents = append(contents, m.Content)
		}
		if !slices.Equal(contents, []string{"root in", "root out"}) {
			t.Fatalf("root-only = %v", contents)
		}
		// Paging stays by message id with the filter on.
		page, _ := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid, Limit: 1, RootOnly: true, Before: root[1].MessageID})
		if len(page) != 1 || page[0].Content != "root in" {
			t.Fatalf("page = %+v", page)
		}
	})
}

func TestAgentDescriptionAndEcho(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		a, err := s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a1", Name: "A", Endpoint: "http://x", LinkedAgents: json.RawMessage(`["b","c"]`), KeyHash: "h1", At: 1})
		if err != nil || a.SubAgentEcho != store.EchoAggregate || a.Description != "" {
			t.Fatalf("default echo: %+v, %v", a, err)
		}
		if links := a.Links(); !slices.Equal(links, []string{"b", "c"}) {
			t.Fatalf("links = %v", links)
		}
		a, err = s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a1", Name: "A", Description: "plans trips", Endpoint: "http://x", SubAgentEcho: store.EchoOff, At: 2})
		if err != nil || a.SubAgentEcho != store.EchoOff || a.Description != "plans trips" {
			t.Fatalf("update: %+v, %v", a, err)
		}
		if got, _ := s.AgentGet(ctx, "a1"); got.Description != "plans trips" || got.SubAgentEcho != store.EchoOff {
			t.Fatalf("get = %+v", got)
		}
		if _, err := s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a2", Name: "B", Endpoint: "http://x", SubAgentEcho: "loud", KeyHash: "h2", At: 3}); err == nil {
			t.Fatal("unknown sub_agent_echo accepted by the schema")
		}
	})
}

// TestAgentToolCalls: a call_<agent> call may run without a deadline while
// its child runs (timeout_ms 0 = none); every other waiting call still
// needs one, and no other kind may have a zero timeout.
func TestAgentToolCalls(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s, raw := openRaw(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		p := callParams(sid, rid, "")
		p.Kind, p.ToolName, p.TimeoutMS = store.ToolKindAgent, "call_b", 0
		c, err := s.ToolCallInsert(ctx, p)
		if err != nil {
			t.Fatalf("agent call with no timeout: %v", err)
		}
		c = stepTo(t, s, c, store.ToolCallPolicyChecked, nil)
		d := int64(500)
		c = stepTo(t, s, c, store.ToolCallDispatched, &d)
		zero := int64(0)
		c, err = s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallDispatched}, Status: store.ToolCallRunning, At: 60, DeadlineAt: &zero, IncAttempts: true})
		if err != nil || c.DeadlineAt != 0 || c.Status != store.ToolCallRunning {
			t.Fatalf("running with no deadline: %+v, %v", c, err)
		}
		// The sweeper never sees it.
		if due, _ := s.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: 1 << 62}); len(due) != 0 {
			t.Fatalf("due = %v", due)
		}
		if c, err = s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallRunning}, Status: store.ToolCallSucceeded, At: 70, Result: json.RawMessage(`{"output":"hi"}`)}); err != nil {
			t.Fatal(err)
		}

		n := 0
		row := func(set map[string]string) error {
			n++
			cols := map[string]string{
				"tool_call_id": fmt.Sprintf("'tc_ag_%d'", n), "run_id": "'" + rid + "'", "session_id": "'s'", "agent_id": "'a'",
				"tool_name": "'call_b'", "kind": "'agent'", "status": "'RUNNING'", "args": `'{}'`, "args_hash": "''",
				"deadline_at": "NULL", "timeout_ms": "0", "created_at": "1", "updated_at": "1", "ended_at": "NULL",
			}
			for k, v := range set {
				cols[k] = v
			}
			var names, vals []string
			for k, v := range cols {
				names = append(names, k)
				vals = append(vals, v)
			}
			sort.Strings(names) // any order; the map's is random
			vals = vals[:0]
			for _, k := range names {
				vals = append(vals, cols[k])
			}
			_, err := raw.Exec(`INSERT INTO tool_calls (` + strings.Join(names, ", ") + `) VALUES (` + strings.Join(vals, ", ") + `)`)
			return err
		}
		for name, set := range map[string]map[string]string{
			"agent running, no timeout":   nil,
			"agent running with timeout":  {"timeout_ms": "5000", "deadline_at": "100"},
			"agent waiting for approval":  {"status": "'WAITING_APPROVAL'", "approval_id": "'ap'", "deadline_at": "100"},
			"agent done":                  {"status": "'SUCCEEDED'", "ended_at": "5"},
			"server running with timeout": {"kind": "'server'", "timeout_ms": "1000", "deadline_at": "100"},
		} {
			if err := row(set); err != nil {
				t.Errorf("%s: refused: %v", name, err)
			}
		}
		for name, set := range map[string]map[string]string{
			"server running without deadline":     {"kind": "'server'", "timeout_ms": "1000"},
			"server with zero timeout":            {"kind": "'server'", "deadline_at": "100"},
			"client waiting without deadline":     {"kind": "'client'", "status": "'WAITING_CLIENT'", "timeout_ms": "1000"},
			"agent with a timeout, no deadline":   {"timeout_ms": "5000"},
			"agent dispatched without deadline":   {"status": "'DISPATCHED'"},
			"agent waiting approval, no deadline": {"status": "'WAITING_APPROVAL'", "approval_id": "'ap'"},
			"agent negative timeout":              {"timeout_ms": "-1"},
			"unknown kind":                        {"kind": "'remote'", "deadline_at": "100", "timeout_ms": "1000"},
		} {
			if err := row(set); err == nil {
				t.Errorf("%s: row accepted", name)
			}
		}
	})
}

// stepTo moves c to status (with deadline, when given) or fails the test.
func stepTo(t *testing.T, s store.Store, c *store.ToolCall, status string, deadline *int64) *store.ToolCall {
	t.Helper()
	c, err := s.ToolCallTransition(context.Background(), &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{c.Status}, Status: status, At: c.UpdatedAt + 1, DeadlineAt: deadline})
	if err != nil {
		t.Fatalf("%s: %v", status, err)
	}
	return c
}

// TestMigrateChildRunsKeepsData: a database made by the migrations before
// issue 9, with runs, messages, tool calls and approvals in it, is
// upgraded in place — every row kept, the tool_calls rebuild (SQLite) with
// its foreign keys and indexes intact.
func TestMigrateChildRunsKeepsData(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		dsn := testdb.DSN(t, dialect)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var db *sql.DB
		var all fs.FS
		var err error
		var driverDSN string
		if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
			all, driverDSN = sqlite.Migrations(), "file:"+path+"?_pragma=foreign_keys(ON)&_pragma=busy_timeout(10000)"
			db, err = sql.Open("sqlite", driverDSN)
		} else {
			all, driverDSN = postgres.Migrations(), dsn
			db, err = sql.Open("pgx", dsn)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// Every migration before issue 9's (0006_child_runs).
		old := fstest.MapFS{}
		names, _ := fs.Glob(all, "migrations/*.sql")
		for _, n := range names {
			if strings.Compare(n, "migrations/0006_child_runs.sql") < 0 {
				b, _ := fs.ReadFile(all, n)
				old[n] = &fstest.MapFile{Data: b}
			}
		}
		if len(old) < 4 || len(old) == len(names) {
			t.Fatalf("found %d of %d migrations before 0006_child_runs", len(old), len(names))
		}
		if err := migrate.Apply(ctx, db, old, "migrations", dialect == "postgres"); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`INSERT INTO sessions (session_id, user_id, created_at) VALUES ('ses_1', 'u1', 1)`,
			`INSERT INTO runs (run_id, session_id, agent_id, status, owner, started_at) VALUES ('run_1', 'ses_1', 'a', 'RUNNING', 'i1', 1)`,
			`INSERT INTO messages (message_id, session_id, run_id, role, content, created_at) VALUES ('msg_1', 'ses_1', 'run_1', 'user', 'hi', 1)`,
			`INSERT INTO agents (agent_id, name, endpoint, key_hash, created_at, updated_at) VALUES ('a', 'A', 'http://x', 'h', 1, 1)`,
			`INSERT INTO tool_calls (tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, args_hash, approval_id, deadline_at, timeout_ms, created_at, updated_at)
			 VALUES ('tc_1', 'run_1', 'ses_1', 'a', 't', 'server', 'WAITING_APPROVAL', '{}', 'h', 'ap_1', 100, 1000, 1, 1)`,
			`INSERT INTO approvals (approval_id, tool_call_id, run_id, session_id, tool_name, status, expires_at, created_at) VALUES ('ap_1', 'tc_1', 'run_1', 'ses_1', 't', 'PENDING', 100, 1)`,
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
		r, err := s.RunGet(ctx, "run_1")
		if err != nil || r.RootRunID != "run_1" || r.Depth != 0 {
			t.Fatalf("run after upgrade = %+v, %v", r, err)
		}
		msgs, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: "ses_1", RootOnly: true})
		if err != nil || len(msgs) != 1 || msgs[0].AgentID != "a" {
			t.Fatalf("messages after upgrade = %+v, %v", msgs, err)
		}
		ag, err := s.AgentGet(ctx, "a")
		if err != nil || ag.SubAgentEcho != store.EchoAggregate {
			t.Fatalf("agent after upgrade = %+v, %v", ag, err)
		}
		c, err := s.ToolCallGet(ctx, "tc_1")
		if err != nil || c.Status != store.ToolCallWaitingApproval || c.DeadlineAt != 100 {
			t.Fatalf("tool call after upgrade = %+v, %v", c, err)
		}
		a, err := s.ApprovalGet(ctx, "ap_1")
		if err != nil || a.ToolCallID != "tc_1" {
			t.Fatalf("approval after upgrade = %+v, %v", a, err)
		}
		if due, _ := s.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: 200}); len(due) != 1 {
			t.Fatalf("the due index lost the call: %v", due)
		}
		// The foreign keys still hold (on SQLite the rebuild ran with them off).
		if _, err := s.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: "ap_2", ToolCallID: "tc_missing", RunID: "run_1", SessionID: "ses_1", ToolName: "t", ExpiresAt: 100, At: 1}); err == nil {
			t.Fatal("approval of a missing tool call accepted after the upgrade")
		}
		if _, err := s.ToolCallInsert(ctx, &store.ToolCallInsertParams{ToolCallID: "tc_2", RunID: "run_missing", SessionID: "ses_1", AgentID: "a", ToolName: "t", Kind: store.ToolKindServer, ArgsHash: "h", TimeoutMS: 1000, At: 1}); err == nil {
			t.Fatal("tool call of a missing run accepted after the upgrade")
		}
		// The idempotency index is back.
		p := &store.ToolCallInsertParams{ToolCallID: "tc_3", RunID: "run_1", SessionID: "ses_1", AgentID: "a", ToolName: "t", Kind: store.ToolKindServer, ArgsHash: "h", IdempotencyKey: "k", TimeoutMS: 1000, At: 1}
		if _, err := s.ToolCallInsert(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.ToolCallID = "tc_4"
		if _, err := s.ToolCallInsert(ctx, p); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("second key after the upgrade: %v, want ErrDuplicate", err)
		}
		_ = driverDSN
	})
}
