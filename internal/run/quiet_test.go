package run

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
	"github.com/agentplane/agentplane/internal/testdb"
)

// countStatements counts the statements st sends that contain each of
// substrs (the first that matches), from now on; each call of the returned
// function returns the counts since the last and starts again.
func countStatements(t *testing.T, st store.Store, substrs ...string) func() [2]int {
	t.Helper()
	if len(substrs) != 2 {
		t.Fatal("countStatements counts two kinds of statement")
	}
	var mu sync.Mutex
	var n [2]int
	st.(*sqlstore.DB).ObserveQueries(func(q string) {
		mu.Lock()
		defer mu.Unlock()
		for i, sub := range substrs {
			if strings.Contains(q, sub) {
				n[i]++
				return
			}
		}
	})
	return func() [2]int {
		mu.Lock()
		defer mu.Unlock()
		got := n
		n = [2]int{}
		return got
	}
}

// A run ended as quiet (a remote A2A agent's) is ended without reading its
// outlook first on PostgreSQL; when it was not quiet after all — an LLM
// call, a child — or had ended already, the transaction runs again reading
// first, and the end is what it would have been: the cost summed, the
// child ended, nothing recorded twice. SQLite reads first always.
func TestQuietEndFallsBackToReading(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		ctx := context.Background()
		counts := countStatements(t, st, "agentplane_run_end_quiet", "EXISTS (SELECT 1 FROM runs WHERE parent_run_id")
		log := eventlog.New(st, eventlog.Options{})
		defer log.Stop()
		m := New(log, Options{InstanceID: "t", HeartbeatInterval: time.Hour})
		newRun := func() *store.Run {
			t.Helper()
			sid := ids.New("ses")
			if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
			rid := ids.New("run")
			r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: rid, SessionID: sid, AgentID: "remote", RootRunID: rid, UserID: "u", Owner: "t", StartedAt: 1,
				IntentionID: ids.New("int")})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		end := func(r *store.Run) []store.Event {
			t.Helper()
			evs, err := log.Do(ctx, r.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
				evs, _, err := m.EndTx(ctx, tx, r, 9, End{Status: store.RunDone, Output: "pong", Usage: json.RawMessage(`{"words":1}`), Reason: "the run finished",
					Invoke: map[string]any{"deltas": 1}, quiet: true})
				return evs, err
			})
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		// wantCounts: on PostgreSQL the quiet end is tried first, and read
		// again only when it fails; SQLite reads once.
		wantCounts := func(step string, failed bool) {
			t.Helper()
			want := [2]int{0, 1}
			if step == "ended" {
				want = [2]int{} // the UPDATE finds it ended: nothing more is read
			}
			if dialect == "postgres" {
				want = [2]int{1, 0}
				if failed {
					want = [2]int{1, 1}
				}
			}
			if got := counts(); got != want {
				t.Fatalf("%s: %d quiet ends and %d outlook reads, want %v", step, got[0], got[1], want)
			}
		}
		runDone := func(step string, evs []store.Event) (cost float64, calls int) {
			t.Helper()
			var types []string
			for _, e := range evs {
				types = append(types, e.Type)
			}
			if len(evs) == 0 || evs[len(evs)-1].Type != eventlog.TypeRunDone {
				t.Fatalf("%s: events %v", step, types)
			}
			var p struct {
				TotalCost float64 `json:"total_cost"`
				LLMCalls  int     `json:"llm_calls"`
			}
			if err := json.Unmarshal(evs[len(evs)-1].Payload, &p); err != nil {
				t.Fatal(err)
			}
			return p.TotalCost, p.LLMCalls
		}
		transcript := func(r *store.Run) int {
			t.Helper()
			msgs, err := st.MessagesList(ctx, &store.MessagesListParams{SessionID: r.SessionID, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			return len(msgs)
		}
		counts()

		// Quiet indeed: the end as always, from one try.
		r := newRun()
		evs := end(r)
		wantCounts("quiet", false)
		if cost, calls := runDone("quiet", evs); cost != 0 || calls != 0 || len(evs) != 2 || evs[0].Type != eventlog.TypeAgentInvokeDone {
			t.Fatalf("quiet: %d events, cost %v, calls %d", len(evs), cost, calls)
		}
		got, err := st.RunGet(ctx, r.RunID)
		if err != nil || got.Status != store.RunDone || got.EndedAt != 9 || string(got.Usage) != `{"words":1}` || transcript(r) != 1 {
			t.Fatalf("quiet: row %+v %v, %d transcript rows", got, err, transcript(r))
		}

		// LLM calls after all: summed after the second try.
		r = newRun()
		if _, err := log.Append(ctx, store.EventParams{SessionID: r.SessionID, RunID: r.RunID, TS: 2, Type: eventlog.TypeLLMCallDone, Payload: json.RawMessage(`{"estimated_cost":0.5}`)},
			store.EventParams{SessionID: r.SessionID, RunID: r.RunID, TS: 3, Type: eventlog.TypeLLMCallDone, Payload: json.RawMessage(`{"estimated_cost":0.25}`)}); err != nil {
			t.Fatal(err)
		}
		counts()
		evs = end(r)
		wantCounts("LLM calls", true)
		if cost, calls := runDone("LLM calls", evs); cost != 0.75 || calls != 2 || transcript(r) != 1 {
			t.Fatalf("LLM calls: cost %v, calls %d, %d transcript rows", cost, calls, transcript(r))
		}

		// A child still running: ended with its parent after the second try.
		r = newRun()
		child, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: r.SessionID, AgentID: "b", ParentRunID: r.RunID, RootRunID: r.RunID, Depth: 1,
			UserID: "u", Owner: "t", StartedAt: 2, IntentionID: r.IntentionID})
		if err != nil {
			t.Fatal(err)
		}
		counts()
		runDone("child", end(r))
		wantCounts("child", true)
		if c, err := st.RunGet(ctx, child.RunID); err != nil || c.Status != store.RunCancelled || !strings.Contains(string(c.Error), "parent_ended") {
			t.Fatalf("child: %+v %v", c, err)
		}

		// Ended already: nothing recorded, from either try (PostgreSQL sends
		// the UPDATE and the outlook together).
		if evs := end(r); len(evs) != 0 {
			t.Fatalf("ended run: %d events recorded again", len(evs))
		}
		wantCounts("ended", true)
		if n := transcript(r); n != 1 {
			t.Fatalf("ended run: %d transcript rows", n)
		}
	})
}
