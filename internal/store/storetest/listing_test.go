package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// listFixture is a small world: sessions of two users created at known
// times, runs of two agents (one child run), some events.
type listFixture struct {
	s                  store.Store
	ses                []string // ses[i] created at 100+i
	runs               map[string]*store.Run
	rootA, childB, rtB string
}

func newListFixture(t *testing.T, dialect string) *listFixture {
	t.Helper()
	s := testdb.Open(t, dialect)
	ctx := context.Background()
	f := &listFixture{s: s, runs: map[string]*store.Run{}}
	for i := range 5 {
		user := "alice"
		if i%2 == 1 {
			user = "bob"
		}
		id := fmt.Sprintf("ses_%02d", i)
		if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: id, UserID: user, CreatedAt: int64(100 + i)}); err != nil {
			t.Fatal(err)
		}
		f.ses = append(f.ses, id)
	}
	ins := func(id, session, agent, parent, user string, at int64) {
		t.Helper()
		r, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: id, SessionID: session, AgentID: agent, ParentRunID: parent, UserID: user, Owner: "i1", StartedAt: at})
		if err != nil {
			t.Fatalf("insert run %s: %v", id, err)
		}
		f.runs[id] = r
	}
	// ses_00 (alice): a finished run of agent a, then a child of b under an
	// active root of a.
	ins("run_1", "ses_00", "a", "", "alice", 200)
	if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: "run_1", From: store.RunActiveStatuses, Status: store.RunDone, At: 210}); err != nil {
		t.Fatal(err)
	}
	ins("run_2", "ses_00", "a", "", "alice", 220)
	ins("run_3", "ses_00", "b", "run_2", "alice", 230)
	// ses_01 (bob): one finished run of b.
	ins("run_4", "ses_01", "b", "", "bob", 240)
	if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: "run_4", From: store.RunActiveStatuses, Status: store.RunFailed, At: 250}); err != nil {
		t.Fatal(err)
	}
	f.rootA, f.childB, f.rtB = "run_2", "run_3", "run_4"
	if _, err := s.EventsAppend(ctx, []store.EventParams{
		{SessionID: "ses_00", RunID: "run_1", TS: 201, Type: "run_started"},
		{SessionID: "ses_00", RunID: "run_3", ParentRunID: "run_2", TS: 235, Type: "run_started"},
		{SessionID: "ses_01", RunID: "run_4", TS: 241, Type: "run_started"},
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

func sessionIDs(list []*store.SessionSummary) []string {
	out := []string{}
	for _, s := range list {
		out = append(out, s.SessionID)
	}
	return out
}

func TestSessionList(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		f := newListFixture(t, dialect)
		ctx := context.Background()
		list := func(p store.SessionListParams) []*store.SessionSummary {
			t.Helper()
			out, err := f.s.SessionList(ctx, &p)
			if err != nil {
				t.Fatalf("list %+v: %v", p, err)
			}
			return out
		}
		all := list(store.SessionListParams{})
		if got := sessionIDs(all); !reflect.DeepEqual(got, []string{"ses_04", "ses_03", "ses_02", "ses_01", "ses_00"}) {
			t.Fatalf("all sessions, newest first: %v", got)
		}
		s0 := all[4]
		want := store.SessionSummary{Session: store.Session{SessionID: "ses_00", UserID: "alice", CreatedAt: 100, LastSeq: 2, Metadata: s0.Metadata},
			LastEventAt: 235, Status: store.SessionActive, RootRuns: 2, Agents: []string{"a", "b"}}
		if !reflect.DeepEqual(*s0, want) {
			t.Fatalf("ses_00 = %+v\nwant %+v", *s0, want)
		}
		if s1 := all[3]; s1.Status != store.SessionEnded || s1.RootRuns != 1 || !reflect.DeepEqual(s1.Agents, []string{"b"}) || s1.LastEventAt != 241 {
			t.Fatalf("ses_01 = %+v", s1)
		}
		if s4 := all[0]; s4.Status != store.SessionEnded || s4.RootRuns != 0 || len(s4.Agents) != 0 || s4.LastEventAt != 0 {
			t.Fatalf("ses_04 (no runs) = %+v", s4)
		}
		for _, c := range []struct {
			p    store.SessionListParams
			want []string
		}{
			{store.SessionListParams{UserID: "bob"}, []string{"ses_03", "ses_01"}},
			{store.SessionListParams{AgentID: "b"}, []string{"ses_01", "ses_00"}},
			{store.SessionListParams{AgentID: "a", UserID: "bob"}, []string{}},
			{store.SessionListParams{Status: store.SessionActive}, []string{"ses_00"}},
			{store.SessionListParams{Status: store.SessionEnded, UserID: "alice"}, []string{"ses_04", "ses_02"}},
			{store.SessionListParams{IDPrefix: "ses_0"}, []string{"ses_04", "ses_03", "ses_02", "ses_01", "ses_00"}},
			{store.SessionListParams{IDPrefix: "ses_03"}, []string{"ses_03"}},
			{store.SessionListParams{IDPrefix: "ses_%"}, []string{}},
			{store.SessionListParams{Since: 101, Until: 103}, []string{"ses_02", "ses_01"}},
		} {
			if got := sessionIDs(list(c.p)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("list %+v = %v, want %v", c.p, got, c.want)
			}
		}
		// Paging: two at a time; a session created between pages (newer
		// than everything) neither repeats nor shifts a row.
		p1 := list(store.SessionListParams{Limit: 2})
		if _, err := f.s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "ses_99", UserID: "alice", CreatedAt: 999}); err != nil {
			t.Fatal(err)
		}
		last := p1[len(p1)-1]
		p2 := list(store.SessionListParams{Limit: 2, After: &store.Cursor{Key: last.CreatedAt, ID: last.SessionID}})
		last = p2[len(p2)-1]
		p3 := list(store.SessionListParams{Limit: 2, After: &store.Cursor{Key: last.CreatedAt, ID: last.SessionID}})
		got := append(append(sessionIDs(p1), sessionIDs(p2)...), sessionIDs(p3)...)
		if !reflect.DeepEqual(got, []string{"ses_04", "ses_03", "ses_02", "ses_01", "ses_00"}) {
			t.Fatalf("paged: %v", got)
		}
		// Ties on created_at are broken by id.
		for _, id := range []string{"ses_t1", "ses_t2", "ses_t3"} {
			if _, err := f.s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: id, UserID: "carol", CreatedAt: 500}); err != nil {
				t.Fatal(err)
			}
		}
		a := list(store.SessionListParams{UserID: "carol", Limit: 1})
		b := list(store.SessionListParams{UserID: "carol", Limit: 5, After: &store.Cursor{Key: 500, ID: a[0].SessionID}})
		if got := append(sessionIDs(a), sessionIDs(b)...); !reflect.DeepEqual(got, []string{"ses_t3", "ses_t2", "ses_t1"}) {
			t.Fatalf("ties: %v", got)
		}
	})
}

func TestRunList(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		f := newListFixture(t, dialect)
		ctx := context.Background()
		for _, c := range []struct {
			p    store.RunListParams
			want []string
		}{
			{store.RunListParams{}, []string{"run_4", "run_3", "run_2", "run_1"}},
			{store.RunListParams{Asc: true}, []string{"run_1", "run_2", "run_3", "run_4"}},
			{store.RunListParams{SessionID: "ses_00"}, []string{"run_3", "run_2", "run_1"}},
			{store.RunListParams{UserID: "bob"}, []string{"run_4"}},
			{store.RunListParams{AgentID: "b"}, []string{"run_4", "run_3"}},
			{store.RunListParams{RootOnly: true, SessionID: "ses_00"}, []string{"run_2", "run_1"}},
			{store.RunListParams{ParentRunID: "run_2"}, []string{"run_3"}},
			{store.RunListParams{Statuses: []string{store.RunDone, store.RunFailed}}, []string{"run_4", "run_1"}},
			{store.RunListParams{Statuses: store.RunActiveStatuses}, []string{"run_3", "run_2"}},
			{store.RunListParams{Since: 220, Until: 240}, []string{"run_3", "run_2"}},
			{store.RunListParams{Limit: 2, After: &store.Cursor{Key: 230, ID: "run_3"}}, []string{"run_2", "run_1"}},
			{store.RunListParams{Asc: true, Limit: 1, After: &store.Cursor{Key: 220, ID: "run_2"}}, []string{"run_3"}},
		} {
			got, err := f.s.RunList(ctx, &c.p)
			if err != nil {
				t.Fatalf("list %+v: %v", c.p, err)
			}
			if !reflect.DeepEqual(runIDs(got), c.want) {
				t.Errorf("list %+v = %v, want %v", c.p, runIDs(got), c.want)
			}
		}
		got, _ := f.s.RunList(ctx, &store.RunListParams{ParentRunID: "run_2"})
		if r := got[0]; r.SessionID != "ses_00" || r.AgentID != "b" || r.ParentRunID != "run_2" || r.Status != store.RunRunning || r.StartedAt != 230 {
			t.Fatalf("child run row %+v", r)
		}
	})
}

func TestRegistryPages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for i, id := range []string{"c", "a", "b"} {
			if _, err := s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: id, Name: id, Endpoint: "http://x", KeyHash: "h" + id, At: int64(i)}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.ToolPut(ctx, &store.ToolPutParams{Name: "t." + id, Definition: json.RawMessage(`{}`), At: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		var agents, tools []string
		after := ""
		for {
			page, err := s.AgentListPage(ctx, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range page {
				agents = append(agents, a.AgentID)
			}
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].AgentID
		}
		after = ""
		for {
			page, err := s.ToolListPage(ctx, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range page {
				tools = append(tools, tr.Name)
			}
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].Name
		}
		if !reflect.DeepEqual(agents, []string{"a", "b", "c"}) || !reflect.DeepEqual(tools, []string{"t.a", "t.b", "t.c"}) {
			t.Fatalf("agents %v, tools %v", agents, tools)
		}
	})
}

func TestApprovalListPaging(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		var ids []string
		for range 3 {
			sid, rid := newRun(t, s)
			_, a := waitingApproval(t, s, sid, rid, 10_000)
			ids = append(ids, a.ApprovalID)
		}
		list := func(p store.ApprovalListParams) []string {
			t.Helper()
			out, err := s.ApprovalList(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, a := range out {
				got = append(got, a.ApprovalID)
			}
			return got
		}
		// All three were created at the same ms: the id orders them.
		asc := list(store.ApprovalListParams{})
		if len(asc) != 3 {
			t.Fatalf("all: %v", asc)
		}
		desc := list(store.ApprovalListParams{Desc: true})
		if !reflect.DeepEqual(desc, []string{asc[2], asc[1], asc[0]}) {
			t.Fatalf("desc %v, asc %v", desc, asc)
		}
		all, _ := s.ApprovalList(ctx, &store.ApprovalListParams{})
		first := all[0]
		if got := list(store.ApprovalListParams{After: &store.Cursor{Key: first.CreatedAt, ID: first.ApprovalID}}); !reflect.DeepEqual(got, asc[1:]) {
			t.Fatalf("after the first: %v, want %v", got, asc[1:])
		}
		if got := list(store.ApprovalListParams{UserID: "u1", Status: store.ApprovalPending}); len(got) != 3 {
			t.Fatalf("u1's pending approvals: %v", got)
		}
		if got := list(store.ApprovalListParams{UserID: "nobody"}); len(got) != 0 {
			t.Fatalf("another user's approvals: %v", got)
		}
	})
}

func TestUsageSummary(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		f := newListFixture(t, dialect)
		ctx := context.Background()
		call := func(session, run string, ts int64, model string, p, c, cached, reasoning int64, cost float64) store.EventParams {
			b, _ := json.Marshal(map[string]any{"model": model, "prompt_tokens": p, "completion_tokens": c, "cached_tokens": cached,
				"reasoning_tokens": reasoning, "total_tokens": p + c, "estimated_cost": cost})
			return store.EventParams{SessionID: session, RunID: run, TS: ts, Type: "llm_call_done", Payload: b}
		}
		if _, err := f.s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "agent:b", CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.EventsAppend(ctx, []store.EventParams{
			call("ses_00", "run_1", 1000, "m1", 100, 10, 50, 0, 0.25),
			call("ses_00", "run_3", 1001, "m2", 200, 20, 0, 5, 0.5),
			call("ses_01", "run_4", 1002, "m1", 300, 30, 0, 0, 0.125),
			call("agent:b", "", 1003, "m2", 7, 3, 0, 0, 0),
			call("ses_01", "run_4", 5000, "m1", 1, 1, 0, 0, 1), // outside the period
			{SessionID: "ses_01", RunID: "run_4", TS: 1004, Type: "llm_call_started", Payload: json.RawMessage(`{"model":"m1","prompt_tokens":999}`)},
		}); err != nil {
			t.Fatal(err)
		}
		sum := func(by string) []store.UsageRow {
			t.Helper()
			rows, err := f.s.UsageSummary(ctx, &store.UsageParams{GroupBy: by, Since: 1000, Until: 5000, AgentSessionPrefix: "agent:"})
			if err != nil {
				t.Fatalf("usage by %s: %v", by, err)
			}
			return rows
		}
		wantAgent := []store.UsageRow{
			{Key: "a", LLMCalls: 1, PromptTokens: 100, CompletionTokens: 10, CachedTokens: 50, TotalTokens: 110, EstimatedCost: 0.25},
			{Key: "b", LLMCalls: 3, PromptTokens: 507, CompletionTokens: 53, ReasoningTokens: 5, TotalTokens: 560, EstimatedCost: 0.625},
		}
		if got := sum(store.UsageByAgent); !reflect.DeepEqual(got, wantAgent) {
			t.Errorf("by agent %+v\nwant %+v", got, wantAgent)
		}
		wantModel := []store.UsageRow{
			{Key: "m1", LLMCalls: 2, PromptTokens: 400, CompletionTokens: 40, CachedTokens: 50, TotalTokens: 440, EstimatedCost: 0.375},
			{Key: "m2", LLMCalls: 2, PromptTokens: 207, CompletionTokens: 23, ReasoningTokens: 5, TotalTokens: 230, EstimatedCost: 0.5},
		}
		if got := sum(store.UsageByModel); !reflect.DeepEqual(got, wantModel) {
			t.Errorf("by model %+v\nwant %+v", got, wantModel)
		}
		wantUser := []store.UsageRow{
			{Key: "", LLMCalls: 1, PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10},
			{Key: "alice", LLMCalls: 2, PromptTokens: 300, CompletionTokens: 30, CachedTokens: 50, ReasoningTokens: 5, TotalTokens: 330, EstimatedCost: 0.75},
			{Key: "bob", LLMCalls: 1, PromptTokens: 300, CompletionTokens: 30, TotalTokens: 330, EstimatedCost: 0.125},
		}
		if got := sum(store.UsageByUser); !reflect.DeepEqual(got, wantUser) {
			t.Errorf("by user %+v\nwant %+v", got, wantUser)
		}
		if _, err := f.s.UsageSummary(ctx, &store.UsageParams{GroupBy: "tool"}); err == nil {
			t.Error("unknown grouping accepted")
		}
	})
}
