package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestDemoPlanner (issue 9 deliverable 7): `serve --demo` starts a planner
// linked to two workers, all real HTTP agents registered over the admin
// API. The planner's model (the built-in upstream) calls the weather
// researcher, then the payments agent — whose transfer of 250 waits for an
// approval inside its child run, decided here over WebSocket — and sums
// both answers up. Deterministic, offline, on both stores.
func TestDemoPlanner(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = strings.TrimSuffix(dsn, ".db") + "-demo.db"
		}
		s := startDemoOn(t, dsn, nil)
		out := s.output()
		for _, line := range []string{`demo agent "weather" serving at`, `demo agent "payments" serving at`, `demo agent "planner" serving at`, "(calls weather, payments, currency)", "or the planner: "} {
			if !strings.Contains(out, line) {
				t.Errorf("the startup output lacks %q:\n%s", line, out)
			}
		}
		code, ag := s.call("GET", "/v1/agents/planner", adminKey, nil)
		if code != http.StatusOK || !slices.Equal(toStrings(ag["linked_agents"]), []string{"weather", "payments", "currency"}) {
			t.Fatalf("planner: %d %v", code, ag)
		}

		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "planner",
			"message": map[string]any{"role": "user", "content": "Plan my trip: weather in Paris, then send 250 to Bob"}})
		var rootID string
		var msgs []map[string]any
		for {
			m := c.next()
			msgs = append(msgs, m)
			if m["type"] == "run_started" && rootID == "" {
				rootID = sv(m, "run_id")
			}
			if m["type"] == "approval_required" {
				c.send(map[string]any{"type": "approval_decision", "request_id": "ap", "run_id": m["run_id"], "approval_id": m["approval_id"], "decision": "approve"})
			}
			if isEnd(m) && sv(m, "run_id") == rootID {
				break
			}
		}
		if end := msgs[len(msgs)-1]; end["type"] != "done" {
			t.Fatalf("the planner ended %v", end)
		}
		var starts, completes []map[string]any
		partials := map[string]string{}
		var approvals []map[string]any
		for _, m := range msgs {
			switch m["type"] {
			case "sub_agent_call_start":
				starts = append(starts, m)
			case "sub_agent_complete":
				completes = append(completes, m)
			case "sub_agent_partial":
				partials[sv(m, "run_id")] += sv(m, "text")
			case "approval_required":
				approvals = append(approvals, m)
			}
		}
		if len(starts) != 2 || sv(starts[0], "agent_id") != "weather" || sv(starts[0], "input_summary") != "Plan my trip: weather in Paris" ||
			sv(starts[1], "agent_id") != "payments" || sv(starts[1], "input_summary") != "send 250 to Bob" {
			t.Fatalf("sub-agent calls %v", starts)
		}
		weather, payments := sv(starts[0], "run_id"), sv(starts[1], "run_id")
		if len(completes) != 2 || sv(completes[0], "run_id") != weather || !strings.Contains(sv(completes[0], "output"), "city: Paris") ||
			sv(completes[1], "run_id") != payments || !strings.Contains(sv(completes[1], "output"), "status: sent") {
			t.Fatalf("sub-agent answers %v", completes)
		}
		if !strings.Contains(partials[weather], "city: Paris") || !strings.Contains(partials[payments], "status: sent") {
			t.Errorf("partials %v", partials)
		}
		if len(approvals) != 1 || sv(approvals[0], "run_id") != payments || sv(approvals[0], "parent_run_id") != rootID || sv(approvals[0], "tool_name") != "demo.transfer" {
			t.Errorf("approvals %v", approvals)
		}
		answer := text(msgs)
		for _, want := range []string{"Tool results:", "- call_weather: Tool result: city: Paris", "- call_payments: ", "amount: 250", "to: Bob", "status: sent"} {
			if !strings.Contains(answer, want) {
				t.Errorf("the planner's answer %q lacks %q", answer, want)
			}
		}
		// One traced, billed tree: the planner's three model calls and each
		// worker's two, the tool calls of all.
		code, tree := s.call("GET", "/v1/runs/"+rootID+"/tree", adminKey, nil)
		if code != http.StatusOK || len(tree["children"].([]any)) != 2 {
			t.Fatalf("tree: %d %v", code, tree)
		}
		if tu := obj(tree, "total_usage"); num(tu, "llm_calls") != 7 || num(tu, "tool_calls") != 4 || num(tu, "estimated_cost") <= 0 {
			t.Errorf("total_usage %v", tu)
		}
	})
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
