package storetest

// Input required (issue 10, DESIGN §12): the INPUT_REQUIRED status,
// intentions, resumes and the queries over them, on both databases; and the
// migration that adds them, applied to a database holding rows.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

func TestInputRequiredRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		first := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "w", UserID: "u1", StartedAt: 1, IntentionID: "int_1"})
		if first.IntentionID != "int_1" || first.ResumesRunID != "" || first.Question != "" {
			t.Fatalf("inserted %+v", first)
		}
		ended, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: first.RunID, From: store.RunActiveStatuses, Status: store.RunInputRequired, At: 5,
			Question: "Which city?", QuestionDetail: json.RawMessage(`{"choices":["Paris"]}`)})
		if err != nil {
			t.Fatal(err)
		}
		if ended.Status != store.RunInputRequired || ended.EndedAt != 5 || ended.Question != "Which city?" || string(ended.QuestionDetail) != `{"choices":["Paris"]}` {
			t.Fatalf("ended %+v", ended)
		}
		if !store.RunIsTerminal(ended.Status) {
			t.Fatal("INPUT_REQUIRED is not terminal")
		}
		if m, _ := s.RunsEnded(ctx, []string{first.RunID}); !m[first.RunID] {
			t.Error("RunsEnded misses an INPUT_REQUIRED run")
		}
		if act, _ := s.RunListActive(ctx, &store.RunListActiveParams{}); len(act) != 0 {
			t.Errorf("active runs %v", runIDs(act))
		}
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: first.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: 6}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("a second end: %v, want ErrConflict", err)
		}
		// The session is free: the answer is a new root run resuming it.
		second := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "w", UserID: "u1", StartedAt: 7, IntentionID: "int_1", ResumesRunID: first.RunID})
		if second.ResumesRunID != first.RunID {
			t.Fatalf("second %+v", second)
		}
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: second.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: 8}); err != nil {
			t.Fatal(err)
		}
		// A run is answered once.
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: "run_again", SessionID: sid, AgentID: "w", UserID: "u1", Owner: "i1", StartedAt: 9,
			IntentionID: "int_1", ResumesRunID: first.RunID}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("a second answer: %v, want ErrConflict", err)
		}
		// The CHECK still refuses unknown statuses.
		third := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "x", UserID: "u1", StartedAt: 10, IntentionID: "int_2"})
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: third.RunID, From: store.RunActiveStatuses, Status: "BOGUS", At: 11}); err == nil {
			t.Error("status BOGUS accepted")
		}
		child := insertRun(t, s, &store.RunInsertParams{SessionID: sid, AgentID: "w", ParentRunID: third.RunID, RootRunID: third.RunID, Depth: 1, UserID: "u1", StartedAt: 12, IntentionID: "int_2"})

		latest := func(p store.RunLatestParams) string {
			r, err := s.RunLatest(ctx, &p)
			if errors.Is(err, store.ErrNotFound) {
				return "none"
			}
			if err != nil {
				t.Fatal(err)
			}
			return r.RunID
		}
		for name, c := range map[string]struct {
			p    store.RunLatestParams
			want string
		}{
			"session":         {store.RunLatestParams{SessionID: sid}, child.RunID},
			"roots":           {store.RunLatestParams{SessionID: sid, RootOnly: true}, third.RunID},
			"agent":           {store.RunLatestParams{SessionID: sid, AgentID: "w"}, child.RunID},
			"root agent":      {store.RunLatestParams{SessionID: sid, AgentID: "w", RootOnly: true}, second.RunID},
			"intention":       {store.RunLatestParams{SessionID: sid, IntentionID: "int_1"}, second.RunID},
			"intention agent": {store.RunLatestParams{SessionID: sid, IntentionID: "int_2", AgentID: "w"}, child.RunID},
			"none":            {store.RunLatestParams{SessionID: sid, IntentionID: "int_9"}, "none"},
			"another session": {store.RunLatestParams{SessionID: "ses_other"}, "none"},
		} {
			if got := latest(c.p); got != c.want {
				t.Errorf("%s: %s, want %s", name, got, c.want)
			}
		}
		list, err := s.RunListIntention(ctx, "int_2")
		if err != nil || strings.Join(runIDs(list), ",") != third.RunID+","+child.RunID {
			t.Errorf("intention int_2: %v %v", runIDs(list), err)
		}
		if list, _ := s.RunListIntention(ctx, ""); len(list) != 0 {
			t.Errorf("the empty intention lists %v", runIDs(list))
		}

		if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: "msg_a", SessionID: sid, RunID: first.RunID, AgentID: "w", IntentionID: "int_1", Role: "assistant", Content: "Which city?", CreatedAt: 5}); err != nil {
			t.Fatal(err)
		}
		msgs, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid})
		if err != nil || len(msgs) != 1 || msgs[0].IntentionID != "int_1" {
			t.Errorf("messages %+v %v", msgs, err)
		}
	})
}

// TestMigrateInputRequiredKeepsData: a database made by the migrations
// before issue 10 is upgraded in place: rows kept, INPUT_REQUIRED allowed
// (and only with ended_at), other statuses still refused, foreign keys
// intact (SQLite edits the stored table definition rather than rebuilding).
func TestMigrateInputRequiredKeepsData(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		dsn := testdb.DSN(t, dialect)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db := databaseBefore(t, ctx, dialect, dsn, "0040_input_required")
		defer db.Close()
		for _, q := range []string{
			`INSERT INTO sessions (session_id, user_id, created_at) VALUES ('ses_1', 'u1', 1)`,
			`INSERT INTO runs (run_id, session_id, agent_id, root_run_id, status, owner, started_at, ended_at) VALUES ('run_1', 'ses_1', 'a', 'run_1', 'DONE', 'i1', 1, 2)`,
			`INSERT INTO runs (run_id, session_id, agent_id, root_run_id, status, owner, started_at) VALUES ('run_2', 'ses_1', 'a', 'run_2', 'RUNNING', 'i1', 3)`,
			`INSERT INTO messages (message_id, session_id, run_id, role, content, created_at) VALUES ('msg_1', 'ses_1', 'run_1', 'user', 'hi', 1)`,
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		db.Close()

		s := testdb.OpenDSN(t, dsn) // applies the rest of the migrations
		r, err := s.RunGet(ctx, "run_1")
		if err != nil || r.Status != store.RunDone || r.IntentionID != "" {
			t.Fatalf("run after upgrade = %+v, %v", r, err)
		}
		if msgs, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: "ses_1"}); err != nil || len(msgs) != 1 {
			t.Fatalf("messages after upgrade = %+v, %v", msgs, err)
		}
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: "run_2", From: store.RunActiveStatuses, Status: "BOGUS", At: 4}); err == nil {
			t.Fatal("status BOGUS accepted after the upgrade")
		}
		r, err = s.RunTransition(ctx, &store.RunTransitionParams{RunID: "run_2", From: store.RunActiveStatuses, Status: store.RunInputRequired, At: 4, Question: "?"})
		if err != nil || r.EndedAt != 4 {
			t.Fatalf("INPUT_REQUIRED after the upgrade: %+v %v", r, err)
		}
		if _, err := s.ToolCallInsert(ctx, &store.ToolCallInsertParams{ToolCallID: "tc_2", RunID: "run_missing", SessionID: "ses_1", AgentID: "a", ToolName: "t", Kind: store.ToolKindServer, ArgsHash: "h", TimeoutMS: 1000, At: 1}); err == nil {
			t.Fatal("tool call of a missing run accepted after the upgrade")
		}
		// The ended_at rule covers the new status: an INPUT_REQUIRED row
		// without ended_at is refused by the database itself.
		raw := rawDB(t, dsn)
		defer raw.Close()
		if _, err := raw.ExecContext(ctx, `UPDATE runs SET ended_at = NULL WHERE run_id = 'run_2'`); err == nil {
			t.Fatal("an INPUT_REQUIRED run without ended_at was accepted")
		}
		if _, err := raw.ExecContext(ctx, `INSERT INTO runs (run_id, session_id, agent_id, root_run_id, status, owner, started_at) VALUES ('run_3', 'ses_1', 'a', 'run_3', 'INPUT_REQUIRED', 'i1', 3)`); err == nil {
			t.Fatal("an INPUT_REQUIRED run without ended_at was inserted")
		}
	})
}

func rawDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err = sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(ON)&_pragma=busy_timeout(10000)")
	} else {
		db, err = sql.Open("pgx", dsn)
	}
	if err != nil {
		t.Fatal(err)
	}
	return db
}
