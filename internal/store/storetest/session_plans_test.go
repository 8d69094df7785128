package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A session's newest runs and messages are read through the session's
// index on PostgreSQL even when the planner's statistics make another
// index look cheaper: here a session whose 2,000 runs and messages are
// older than 40,000 of other sessions. Asked with session_id = ?, the
// planner walks runs_started backward for the latest run, filtering out
// every newer one (sqlstore's inSession; this data reproduces it for the
// runs — the messages' primary key was walked the same way on a larger
// table by hand, and their checks here guard the plan they have now).
func TestSessionNewestUseTheSessionIndex(t *testing.T) {
	st, ok := testdb.Open(t, "postgres").(*sqlstore.DB)
	if !ok {
		t.Fatal("the PostgreSQL store is not a *sqlstore.DB")
	}
	var mu sync.Mutex
	var last string
	st.ObserveQueries(func(q string) { mu.Lock(); last = q; mu.Unlock() })
	raw := st.SQL()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO sessions (session_id, user_id, created_at) SELECT 's' || i, 'u', 1 FROM generate_series(0, 399) i`,
		`INSERT INTO sessions (session_id, user_id, created_at) VALUES ('sold', 'u', 1)`,
		`INSERT INTO runs (run_id, session_id, agent_id, parent_run_id, root_run_id, depth, user_id, status, owner, started_at, ended_at, intention_id, resumes_run_id)
			SELECT 'run_a' || lpad(i::text, 8, '0'), 'sold', 'a', '', 'run_a' || lpad(i::text, 8, '0'), 0, 'u', 'DONE', '', 1000 + i, 1001 + i, 'int_a' || i, '' FROM generate_series(1, 2000) i`,
		`INSERT INTO runs (run_id, session_id, agent_id, parent_run_id, root_run_id, depth, user_id, status, owner, started_at, ended_at, intention_id, resumes_run_id)
			SELECT 'run_b' || lpad(i::text, 8, '0'), 's' || (i % 400), 'a', '', 'run_b' || lpad(i::text, 8, '0'), 0, 'u', 'DONE', '', 100000 + i, 100001 + i, 'int_b' || i, '' FROM generate_series(1, 40000) i`,
		`INSERT INTO messages (message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at)
			SELECT 'msg_a' || lpad(i::text, 8, '0'), 'sold', '', 'a', '', '', 'user', 'old ' || i, i FROM generate_series(1, 2000) i`,
		`INSERT INTO messages (message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at)
			SELECT 'msg_b' || lpad(i::text, 8, '0'), 's' || (i % 400), '', 'a', '', '', 'user', 'new ' || i, i FROM generate_series(1, 40000) i`,
		`ANALYZE runs`, `ANALYZE messages`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// plan explains the statement the store just ran, with args.
	plan := func(args ...any) string {
		t.Helper()
		mu.Lock()
		q := last
		mu.Unlock()
		rows, err := raw.QueryContext(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var line sql.NullString
			rows.Scan(&line)
			b.WriteString(line.String + "\n")
		}
		return b.String()
	}
	check := func(what, p, want string, not ...string) {
		t.Helper()
		if !strings.Contains(p, want) {
			t.Errorf("%s does not use %s:\n%s", what, want, p)
		}
		for _, n := range not {
			if strings.Contains(p, n) {
				t.Errorf("%s walks %s:\n%s", what, n, p)
			}
		}
	}
	if r, err := st.RunLatest(ctx, &store.RunLatestParams{SessionID: "sold", RootOnly: true}); err != nil || r.RunID != "run_a00002000" {
		t.Fatalf("latest root run: %+v %v", r, err)
	}
	check("the latest root run", plan("sold", "sold"), "runs_session", "runs_started")
	if r, err := st.RunLatest(ctx, &store.RunLatestParams{SessionID: "sold", AgentID: "a"}); err != nil || r.RunID != "run_a00002000" {
		t.Fatalf("latest run of an agent: %+v %v", r, err)
	}
	check("the latest run of an agent", plan("sold", "sold", "a"), "runs_session", "runs_started")
	if msgs, err := st.MessagesList(ctx, &store.MessagesListParams{SessionID: "sold", Limit: 8, RootOnly: true}); err != nil || len(msgs) != 8 || msgs[7].MessageID != "msg_a00002000" {
		t.Fatalf("newest messages: %d %v", len(msgs), err)
	}
	check("the newest messages", plan("sold", "sold", 8), "Index Scan Backward using messages_root", "messages_pkey")
	if tr, err := st.MessagesTranscript(ctx, "sold", 200, 1<<20); err != nil || len(tr.Messages) != 200 || tr.Messages[199].MessageID != "msg_a00002000" {
		t.Fatalf("transcript: %d %v", len(tr.Messages), err)
	}
	// What the store's transcript statement read, in buffers (they include what
	// a function it calls reads): the most over calls 2–8 on a connection
	// of its own — past a function's compilation (the first), through the
	// custom plans PostgreSQL makes for the first five (for this session's
	// statistics) and the generic one after.
	buffers := func(session string) int {
		t.Helper()
		mu.Lock()
		q := last
		mu.Unlock()
		args := []any{session, 200, 1 << 20}
		if strings.Contains(q, "$4") { // a session range: the session twice
			args = []any{session, session, 200, 1 << 20}
		}
		conn, err := raw.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		most := 0
		for i := range 8 {
			rows, err := conn.QueryContext(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var line string
				rows.Scan(&line)
				if j := strings.Index(line, "shared hit="); j >= 0 && n == 0 {
					fmt.Sscanf(line[j:], "shared hit=%d", &n)
				}
			}
			rows.Close()
			if i > 0 {
				most = max(most, n)
			}
		}
		return most
	}
	if tr, err := st.MessagesTranscript(ctx, "sold", 200, 1<<20); err != nil || len(tr.Messages) != 200 || tr.Messages[199].MessageID != "msg_a00002000" {
		t.Fatalf("transcript: %d %v", len(tr.Messages), err)
	}
	if n := buffers("sold"); n > 40 {
		t.Errorf("the transcript of a 2,000-turn session read %d buffers; its newest 200 are a few pages", n)
	}

	// A session the statistics have not seen: 20,000 turns added after the
	// last ANALYZE, so the planner takes it for a short one. A plain
	// statement then read all its rows by bitmap and sorted them (~200
	// buffers here, and time growing with the session); the transcript
	// must still walk the newest 200 backward and stop.
	if _, err := raw.ExecContext(ctx, `INSERT INTO messages (message_id, session_id, run_id, agent_id, parent_run_id, intention_id, role, content, created_at)
			SELECT 'msg_c' || lpad(i::text, 8, '0'), 'snew', '', 'a', '', '', 'user', 'turn ' || i, i FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if tr, err := st.MessagesTranscript(ctx, "snew", 200, 1<<20); err != nil || len(tr.Messages) != 200 || tr.Messages[199].MessageID != "msg_c00020000" || tr.Messages[0].MessageID != "msg_c00019801" {
		t.Fatalf("transcript of the unseen session: %d %v", len(tr.Messages), err)
	}
	if n := buffers("snew"); n > 40 {
		t.Errorf("the transcript of a 20,000-turn session the statistics have not seen read %d buffers; its newest 200 are a few pages", n)
	}
}
