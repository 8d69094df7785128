package run

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// run_done's total_cost is the sum of the run's LLM call costs rounded to
// 1e-9, so it reads as the decimal it is: 1e-07 + 9e-06 once showed as
// 0.000009100000000000001.
func TestRunDoneTotalCostIsRounded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		ctx := context.Background()
		release := make(chan struct{})
		ag := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-release
			w.Write([]byte("event: done\ndata: {\"usage\":{\"words\":1}}\n\n"))
		}))
		t.Cleanup(ag.Close)
		allow, err := agent.ParseAllowlist("127.0.0.1/32")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a", Name: "a", Endpoint: ag.URL, Capabilities: json.RawMessage(`[]`), LinkedAgents: json.RawMessage(`[]`), At: 1}); err != nil {
			t.Fatal(err)
		}
		log := eventlog.New(st, eventlog.Options{})
		defer log.Stop()
		m := New(log, Options{InstanceID: "t", Invoker: &agent.Client{HTTP: agent.NewHTTPClient(allow)}, HeartbeatInterval: time.Hour})
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown(ctx)
		started, err := m.StartRun(ctx, StartParams{UserID: "u", AgentID: "a", Message: agent.Message{Role: "user", Content: "x"}})
		if err != nil {
			t.Fatal(err)
		}
		rn := started.Run
		// What the LLM proxy records for two calls of the run (each cost
		// already rounded by the proxy).
		var calls []store.EventParams
		for _, cost := range []string{"1e-07", "9e-06"} {
			calls = append(calls, store.EventParams{SessionID: rn.SessionID, RunID: rn.RunID, TS: 1, Type: eventlog.TypeLLMCallDone, Payload: json.RawMessage(`{"estimated_cost":` + cost + `}`)})
		}
		if _, err := log.Append(ctx, calls...); err != nil {
			t.Fatal(err)
		}
		close(release)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r, err := st.RunGet(ctx, rn.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == store.RunDone {
				break
			}
			if store.RunIsTerminal(r.Status) || time.Now().After(deadline) {
				t.Fatalf("run is %s (%s)", r.Status, r.Error)
			}
		}
		evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: rn.SessionID, RunID: rn.RunID, Type: eventlog.TypeRunDone, Limit: 10})
		if err != nil || len(evs) != 1 {
			t.Fatalf("run_done events %v %v", evs, err)
		}
		// Numbers as written (PostgreSQL's jsonb reformats the payload).
		var done struct {
			TotalCost json.Number `json:"total_cost"`
			LLMCalls  json.Number `json:"llm_calls"`
		}
		dec := json.NewDecoder(bytes.NewReader(evs[0].Payload))
		dec.UseNumber()
		if err := dec.Decode(&done); err != nil || done.TotalCost != "0.0000091" || done.LLMCalls != "2" {
			t.Fatalf("run_done %s, want total_cost 0.0000091 over 2 calls", evs[0].Payload)
		}
	})
}
