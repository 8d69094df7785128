package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/migrate"
	"github.com/agentplane/agentplane/internal/store/sqlite"
	"github.com/agentplane/agentplane/internal/testdb"
)

// The registry of MCP servers (DESIGN §13): put reports creation, the spec
// comes back byte for byte, delete of an absent server is ErrNotFound.
func TestMCPServers(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		if _, err := s.MCPServerGet(ctx, "files"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get absent: %v", err)
		}
		// Key order and spacing are kept as given.
		spec := json.RawMessage(`{"transport":"stdio","command":"x","args":["b","a"],"env":{"Z":"1","A":"2"}}`)
		row, created, err := s.MCPServerPut(ctx, &store.MCPServerPutParams{Name: "files", Spec: spec, At: 10})
		if err != nil || !created || row.Name != "files" || string(row.Spec) != string(spec) || row.CreatedAt != 10 || row.UpdatedAt != 10 {
			t.Fatalf("put = %+v %v %v", row, created, err)
		}
		spec2 := json.RawMessage(`{"transport":"streamable_http","url":"http://127.0.0.1:1/mcp"}`)
		row, created, err = s.MCPServerPut(ctx, &store.MCPServerPutParams{Name: "files", Spec: spec2, At: 20})
		if err != nil || created || string(row.Spec) != string(spec2) || row.CreatedAt != 10 || row.UpdatedAt != 20 {
			t.Fatalf("replace = %+v %v %v", row, created, err)
		}
		if _, _, err := s.MCPServerPut(ctx, &store.MCPServerPutParams{Name: "alpha", Spec: spec, At: 30}); err != nil {
			t.Fatal(err)
		}
		list, err := s.MCPServerList(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "files" {
			t.Fatalf("list = %v %v", list, err)
		}
		got, err := s.MCPServerGet(ctx, "files")
		if err != nil || string(got.Spec) != string(spec2) {
			t.Fatalf("get = %+v %v", got, err)
		}
		if err := s.MCPServerDelete(ctx, "files"); err != nil {
			t.Fatal(err)
		}
		if err := s.MCPServerDelete(ctx, "files"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if _, _, err := s.MCPServerPut(ctx, &store.MCPServerPutParams{Name: "empty", At: 1}); err == nil {
			t.Fatal("empty spec accepted")
		}
	})
}

// Tool calls of kind mcp are stored like any other (migration 0010 added
// the kind to the schema's list); unknown kinds are still refused
// (TestToolCheckConstraints), and so is none.
func TestToolCallKindMCP(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sessionID, runID := newRun(t, s)
		p := callParams(sessionID, runID, "")
		p.Kind, p.ToolName = store.ToolKindMCP, "files@read"
		c, err := s.ToolCallInsert(ctx, p)
		if err != nil || c.Kind != store.ToolKindMCP {
			t.Fatalf("insert an mcp call: %+v %v", c, err)
		}
		p = callParams(sessionID, runID, "")
		p.Kind = ""
		if _, err := s.ToolCallInsert(ctx, p); err == nil {
			t.Fatal("a call without a kind was stored")
		}
	})
}

// Migration 0010 rebuilds tool_calls on SQLite: the calls and approvals of
// a database migrated before it survive, the indexes are back (the
// idempotency key is still unique per run) and approvals' foreign key
// still refers to tool_calls.
func TestSQLiteMigration0010KeepsToolCalls(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(ON)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	dir := os.DirFS(filepath.Join("..", "sqlite"))
	names, err := fs.Glob(dir, "migrations/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v %v", names, err)
	}
	before := fstest.MapFS{}
	for _, n := range names {
		if filepath.Base(n) >= "0010" {
			continue
		}
		b, err := fs.ReadFile(dir, n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = &fstest.MapFile{Data: b}
	}
	if err := migrate.Apply(ctx, db, before, "migrations", false); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO sessions (session_id, user_id, created_at) VALUES ('s1', 'u1', 1)`,
		`INSERT INTO runs (run_id, session_id, agent_id, status, owner, started_at) VALUES ('r1', 's1', 'a1', 'RUNNING', 'i1', 1)`,
		`INSERT INTO tool_calls (tool_call_id, run_id, session_id, agent_id, tool_name, kind, status, args, idempotency_key, args_hash, approval_id, deadline_at, timeout_ms, created_at, updated_at)
		 VALUES ('tc1', 'r1', 's1', 'a1', 'pay', 'server', 'WAITING_APPROVAL', '{"amount":1}', 'k1', 'h', 'ap1', 99, 1000, 1, 2)`,
		`INSERT INTO approvals (approval_id, tool_call_id, run_id, session_id, tool_name, status, expires_at, created_at) VALUES ('ap1', 'tc1', 'r1', 's1', 'pay', 'PENDING', 99, 2)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("migrate to 0010: %v", err)
	}
	defer s.Close()
	c, err := s.ToolCallGet(ctx, "tc1")
	if err != nil || c.Status != store.ToolCallWaitingApproval || c.IdempotencyKey != "k1" || c.ApprovalID != "ap1" || c.DeadlineAt != 99 || string(c.Args) != `{"amount":1}` {
		t.Fatalf("call after the migration: %+v %v", c, err)
	}
	if a, err := s.ApprovalGet(ctx, "ap1"); err != nil || a.ToolCallID != "tc1" {
		t.Fatalf("approval after the migration: %+v %v", a, err)
	}
	due, err := s.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: 100, Limit: 10})
	if err != nil || len(due) != 1 {
		t.Fatalf("due calls: %v %v", due, err)
	}
	p := callParams("s1", "r1", "k1")
	if _, err := s.ToolCallInsert(ctx, p); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("same idempotency key in the run: %v, want ErrDuplicate", err)
	}
	_, err = s.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: ids.New("ap"), ToolCallID: "no-such-call", RunID: "r1", SessionID: "s1", ToolName: "pay", ExpiresAt: 5, At: 1})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "foreign key") {
		t.Fatalf("approval of a call that does not exist: %v, want a foreign key error", err)
	}
	var leftover int
	if err := s.InTx(ctx, func(tx store.Queries) error { return nil }); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE sql LIKE '%tool_calls_before_0010%'`).Scan(&leftover); err != nil || leftover != 0 {
		t.Fatalf("schema still mentions the old table %d times (%v)", leftover, err)
	}
}
