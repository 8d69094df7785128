package e2e

// End-to-end tests of agents calling agents (issue 9, DESIGN §11): the real
// binary on SQLite and PostgreSQL, real agent processes (the Python SDK
// agent of testdata/chain_agent.py, which runs the plan in its message and
// calls other agents through the tool form and, by plain HTTP, the direct
// form) and real WebSocket clients.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/ingress"
	"github.com/agentplane/agentplane/internal/store"
)

// startChainAgent starts testdata/chain_agent.py as agentID, linking links.
func startChainAgent(t *testing.T, s *server, agentID string, links []string, echo string) {
	t.Helper()
	args := []string{"PYTHONPATH=" + filepath.Join(repoRoot, "sdk", "python"), "python3", "-u",
		filepath.Join(repoRoot, "internal", "e2e", "testdata", "chain_agent.py"), "--agent-id", agentID, "--links", strings.Join(links, ",")}
	if echo != "" {
		args = append(args, "--echo", echo)
	}
	startAgentProcess(t, s, exec.Command("env", args...), agentID)
}

type step = map[string]any

// plan is a chain agent's message: its steps, reporting to report.
func plan(report string, steps ...step) string {
	b, _ := json.Marshal(map[string]any{"steps": steps, "report": report})
	return string(b)
}

// reports collects what the chain agents report ({agent, run_id, event}).
type reports struct {
	p   *toolProbe
	got []map[string]any
}

// until reads reports until pred holds for one; it returns that report.
func (r *reports) until(t *testing.T, what string, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	for _, m := range r.got {
		if pred(m) {
			return m
		}
	}
	for {
		select {
		case m := <-r.p.reports:
			r.got = append(r.got, m)
			if pred(m) {
				return m
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("no report of %s; got %v", what, r.got)
			return nil
		}
	}
}

func reported(agent, event string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["agent"] == agent && m["event"] == event }
}

func reportedRun(runID, event string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["run_id"] == runID && m["event"] == event }
}

// sessionEvents is the session's whole log, as the store rows.
func sessionEvents(t *testing.T, s *server, sid string) []store.Event {
	t.Helper()
	code, body := s.call("GET", "/v1/sessions/"+sid+"/events?limit=10000", adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("session events: %d %v", code, body)
	}
	raw, _ := json.Marshal(body["events"])
	var evs []store.Event
	if err := json.Unmarshal(raw, &evs); err != nil {
		t.Fatal(err)
	}
	return evs
}

func firstSeq(evs []store.Event, runID, typ string) int64 {
	for _, e := range evs {
		if e.RunID == runID && e.Type == typ {
			return e.Seq
		}
	}
	return 0
}

func runOf(t *testing.T, s *server, runID string) map[string]any {
	t.Helper()
	code, r := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("GET run %s: %d %v", runID, code, r)
	}
	return r
}

// onlyChild returns the run id of runID's single child.
func onlyChild(t *testing.T, s *server, runID string) string {
	t.Helper()
	kids, _ := runOf(t, s, runID)["children"].([]any)
	if len(kids) != 1 {
		t.Fatalf("run %s has children %v, want one", runID, kids)
	}
	return kids[0].(string)
}

// TestMultiAgentChain: A → B (tool form) → C (direct form, SSE), with an
// approval at depth 1 decided over WebSocket and a client tool at depth 2
// answered by the same client, which drops its connection mid-chain and
// resubscribes with its last seq: it gets every client-facing event of the
// session exactly once, in order — the children as sub_agent_* events, not
// as raw deltas. A call from depth 2 passes AGENTPLANE_MAX_CALL_DEPTH=2 and
// is refused. Every agent calls the LLM through the proxy; total_usage at
// the root is the sum over the tree.
func TestMultiAgentChain(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		up := httptest.NewServer(fakellm.New(fakellm.Options{}))
		t.Cleanup(up.Close)
		te := newToolEndpoint(t)
		cfg := filepath.Join(t.TempDir(), "agentplane.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`
llm:
  upstreams: [{name: fake, base_url: %q}]
  prices: {fake-gpt: {input: 1.5, cached_input: 0.5, output: 2.5}}
tools:
  - tool_name: chain.approve
    kind: server
    endpoint: %q
    policy: {decision: require_approval}
  - tool_name: chain.ask
    kind: client
`, up.URL+"/v1", te.URL)), 0o600)
		s := startServerEnv(t, dsn, []string{"AGENTPLANE_CONFIG=" + cfg, "AGENTPLANE_MAX_CALL_DEPTH=2"})
		probe := newToolProbe(t)
		rep := &reports{p: probe}
		startChainAgent(t, s, "a", []string{"b"}, "")
		startChainAgent(t, s, "b", []string{"c"}, "")
		startChainAgent(t, s, "c", []string{"b"}, "passthrough")

		r := probe.reportURL()
		cPlan := plan(r, step{"llm": "c thinks"}, step{"tool": "chain.ask", "args": map[string]any{"q": "name?"}},
			step{"call": "b", "form": "json", "message": "one level too deep"}, step{"say": "C done"})
		bPlan := plan(r, step{"llm": "b thinks"}, step{"tool": "chain.approve", "args": map[string]any{"amount": 5}},
			step{"call": "c", "form": "sse", "message": cPlan, "key": "c-1"}, step{"say": "B done"})
		aPlan := plan(r, step{"llm": "a thinks"}, step{"call": "b", "form": "tool", "message": bPlan}, step{"say": "A done"})

		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a", "message": map[string]any{"role": "user", "content": aPlan}})
		var seen []map[string]any // every logged message, over both connections
		var rootID, sid string
		var lastSeq int64
		reconnected := false
		decided, answered := map[string]bool{}, map[string]bool{}
		var rootText strings.Builder
		for done := false; !done; {
			m := c.next()
			if m["seq"] != nil {
				seen = append(seen, m)
				lastSeq = seqOf(m)
			}
			switch m["type"] {
			case "run_started":
				if rootID == "" {
					rootID, sid = sv(m, "run_id"), sv(m, "session_id")
				}
			case "delta":
				if sv(m, "run_id") == rootID {
					rootText.WriteString(sv(m, "text"))
				}
			case "error":
				t.Fatalf("error: %v", m)
			case "approval_required":
				if !reconnected {
					// Drop the connection mid-chain and come back with the
					// last seq seen; what came in meanwhile is replayed.
					c.conn.Close()
					c = dial(t, s, "alice", "alice-key")
					c.send(map[string]any{"type": "subscribe", "request_id": "sub", "session_id": sid, "after_seq": lastSeq})
					reconnected = true
					continue
				}
				if id := sv(m, "approval_id"); !decided[id] {
					decided[id] = true
					c.send(map[string]any{"type": "approval_decision", "request_id": "ap", "run_id": m["run_id"], "approval_id": id, "decision": "approve"})
				}
			case "tool_request":
				if id := sv(m, "tool_call_id"); !answered[id] {
					answered[id] = true
					c.send(map[string]any{"type": "tool_result", "request_id": "tr", "run_id": m["run_id"], "tool_call_id": id, "ok": true, "result": map[string]any{"name": "alice"}})
				}
			case "done":
				done = sv(m, "run_id") == rootID
			}
		}
		if len(decided) != 1 || len(answered) != 1 {
			t.Fatalf("decided %d approvals, answered %d tool requests; want 1 and 1", len(decided), len(answered))
		}

		// Every client-facing event of the session, once, in order.
		evs := sessionEvents(t, s, sid)
		var want, got []int64
		for i := range evs {
			if ingress.ClientMessage(&evs[i]) != nil && evs[i].Seq <= lastSeq {
				want = append(want, evs[i].Seq)
			}
		}
		for _, m := range seen {
			got = append(got, seqOf(m))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("client saw seqs %v\nthe log holds  %v", got, want)
		}

		bID := onlyChild(t, s, rootID)
		cID := onlyChild(t, s, bID)
		byType := map[string][]map[string]any{}
		for _, m := range seen {
			byType[sv(m, "type")] = append(byType[sv(m, "type")], m)
			if m["parent_run_id"] != nil {
				switch m["type"] {
				case "delta", "run_started", "done", "error":
					t.Errorf("a child's raw %s reached the client: %v", m["type"], m)
				}
			}
		}
		starts := byType["sub_agent_call_start"]
		if len(starts) != 2 || sv(starts[0], "run_id") != bID || sv(starts[0], "parent_run_id") != rootID || sv(starts[0], "agent_id") != "b" ||
			sv(starts[1], "run_id") != cID || sv(starts[1], "parent_run_id") != bID {
			t.Errorf("sub_agent_call_start %v", starts)
		}
		completes := byType["sub_agent_complete"]
		if len(completes) != 2 || sv(completes[0], "run_id") != cID || !strings.Contains(sv(completes[0], "output"), "C done") ||
			sv(completes[1], "run_id") != bID || !strings.Contains(sv(completes[1], "output"), "B done") {
			t.Errorf("sub_agent_complete %v", completes)
		}
		partials := map[string]string{}
		for _, m := range byType["sub_agent_partial"] {
			partials[sv(m, "run_id")] += sv(m, "text")
		}
		if !strings.Contains(partials[cID], "C done") || !strings.Contains(partials[bID], "B done") {
			t.Errorf("partials %v", partials)
		}
		if ap := byType["approval_required"]; len(ap) != 1 || sv(ap[0], "run_id") != bID || sv(ap[0], "parent_run_id") != rootID {
			t.Errorf("approval_required %v", ap)
		}
		if tr := byType["tool_request"]; len(tr) != 1 || sv(tr[0], "run_id") != cID || sv(tr[0], "parent_run_id") != bID {
			t.Errorf("tool_request %v", tr)
		}
		for _, want := range []string{"api_error:max_depth_exceeded", `{"name": "alice"}`, "C done", "B done", "A done"} {
			if !strings.Contains(rootText.String(), want) {
				t.Errorf("the root's answer %q lacks %q", rootText.String(), want)
			}
		}

		// The tree, and total_usage summed over it from the log.
		var sum struct {
			prompt, completion, total float64
			cost                      float64
			llm, tools                int
		}
		for _, e := range evs {
			switch e.Type {
			case "llm_call_done":
				var p map[string]any
				json.Unmarshal(e.Payload, &p)
				sum.prompt += num(p, "prompt_tokens")
				sum.completion += num(p, "completion_tokens")
				sum.total += num(p, "total_tokens")
				sum.cost += num(p, "estimated_cost")
				sum.llm++
			case "tool_call_created":
				sum.tools++
			}
		}
		if sum.llm != 3 || sum.tools != 3 || sum.cost <= 0 {
			t.Fatalf("the log holds %d LLM calls, %d tool calls, cost %g", sum.llm, sum.tools, sum.cost)
		}
		root := runOf(t, s, rootID)
		tu := obj(root, "total_usage")
		if num(tu, "prompt_tokens") != sum.prompt || num(tu, "completion_tokens") != sum.completion || num(tu, "total_tokens") != sum.total ||
			math.Abs(num(tu, "estimated_cost")-sum.cost) > 1e-9 || num(tu, "llm_calls") != 3 || num(tu, "tool_calls") != 3 {
			t.Errorf("total_usage %v, the log sums %+v", tu, sum)
		}
		if sv(root, "status") != "DONE" || num(root, "depth") != 0 {
			t.Errorf("root %v", root)
		}
		code, tree := s.call("GET", "/v1/runs/"+rootID+"/tree", "alice-key", nil)
		if code != http.StatusOK {
			t.Fatalf("tree: %d %v", code, tree)
		}
		b := tree["children"].([]any)[0].(map[string]any)
		cn := b["children"].([]any)[0].(map[string]any)
		if sv(b, "run_id") != bID || sv(cn, "run_id") != cID || sv(cn, "status") != "DONE" || len(cn["children"].([]any)) != 0 ||
			num(obj(b, "total_usage"), "llm_calls") != 2 || num(obj(cn, "total_usage"), "llm_calls") != 1 || num(obj(tree, "total_usage"), "llm_calls") != 3 {
			t.Errorf("tree %v", tree)
		}
		if cr := runOf(t, s, cID); num(cr, "depth") != 2 || sv(cr, "parent_run_id") != bID || sv(cr, "session_id") != sid {
			t.Errorf("C's run %v", cr)
		}

		// The transcript says whose each row is.
		code, msgs := s.call("GET", "/v1/sessions/"+sid+"/messages", "alice-key", nil)
		if code != http.StatusOK {
			t.Fatalf("messages: %d %v", code, msgs)
		}
		rows := map[string]int{}
		for _, m := range msgs["messages"].([]any) {
			mm := m.(map[string]any)
			rows[fmt.Sprintf("%v/%v/%v", mm["agent_id"], mm["role"], mm["parent_run_id"])]++
		}
		for _, k := range []string{"a/user/<nil>", "a/assistant/<nil>", "b/user/" + rootID, "b/assistant/" + rootID, "c/user/" + bID, "c/assistant/" + bID} {
			if rows[k] != 1 {
				t.Errorf("transcript rows %v lack %s", rows, k)
			}
		}
		// Every agent's request ended by its own answer.
		for _, id := range []string{rootID, bID, cID} {
			rep.until(t, id+" returned", reportedRun(id, "returned"))
		}
		for _, m := range rep.got {
			if m["event"] == "closed" {
				t.Errorf("a request was closed by the platform: %v", m)
			}
		}
		assertSettled(t, dsn)
	})
}

// TestMultiAgentCancelCascades: cancelling the root of A → B → C (tool
// form, then the direct form) cancels C, then B, then A, in that order in
// the log; the call_b tool call ends with it, and every agent's request is
// closed — none is left open.
func TestMultiAgentCancelCascades(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		probe := newToolProbe(t)
		rep := &reports{p: probe}
		startChainAgent(t, s, "a", []string{"b"}, "")
		startChainAgent(t, s, "b", []string{"c"}, "")
		startChainAgent(t, s, "c", nil, "")
		r := probe.reportURL()
		cPlan := plan(r, step{"say": "holding"}, step{"hold": true})
		bPlan := plan(r, step{"call": "c", "form": "json", "message": cPlan})
		aPlan := plan(r, step{"call": "b", "form": "tool", "message": bPlan})
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a", "message": map[string]any{"role": "user", "content": aPlan}})
		started := c.next()
		rootID, sid := sv(started, "run_id"), sv(started, "session_id")
		held := rep.until(t, "c invoked", reported("c", "invoked"))
		c.send(map[string]any{"type": "cancel_run", "request_id": "cancel", "run_id": rootID, "reason": "changed my mind"})
		for _, agent := range []string{"a", "b", "c"} {
			rep.until(t, agent+"'s request closed", reported(agent, "closed"))
		}
		bID := onlyChild(t, s, rootID)
		cID := onlyChild(t, s, bID)
		if cID != sv(held, "run_id") {
			t.Fatalf("held run %v is not the grandchild %s", held, cID)
		}
		evs := sessionEvents(t, s, sid)
		var prev int64
		for _, id := range []string{cID, bID, rootID} {
			run := waitRunEnded(t, s, id)
			if sv(run, "status") != "CANCELLED" || sv(obj(run, "error"), "code") != "cancelled" {
				t.Errorf("run %s ended %v %v", id, run["status"], run["error"])
			}
			seq := firstSeq(evs, id, "run_cancelled")
			if seq <= prev {
				t.Errorf("run_cancelled of %s at seq %d, after %d: want C, B, A", id, seq, prev)
			}
			prev = seq
		}
		var callID string
		for _, e := range evs {
			if e.RunID == rootID && e.Type == "tool_call_created" {
				var p map[string]any
				json.Unmarshal(e.Payload, &p)
				callID = sv(p, "tool_call_id")
			}
		}
		if tc := toolCall(t, s, callID); sv(tc, "state") != "CANCELLED" {
			t.Errorf("call_b ended %v", tc)
		}
		// The client saw the children end as sub_agent_error, the root as
		// its CANCELLED state.
		var subErrs []string
		for {
			m := c.next()
			if m["type"] == "sub_agent_error" {
				subErrs = append(subErrs, sv(m, "run_id")+":"+sv(m, "code"))
			}
			if isEnd(m) {
				if sv(m, "run_id") != rootID {
					t.Fatalf("a child's end reached the client as %v", m)
				}
				break
			}
		}
		if !slices.Equal(subErrs, []string{cID + ":cancelled", bID + ":cancelled"}) {
			t.Errorf("sub_agent_error %v", subErrs)
		}
		assertSettled(t, dsn)
	})
}

// TestMultiAgentChildFailureHandedBack: a child that fails is handed back
// to its caller, which finishes: sub_agent_failed through the tool form,
// the child's own code through the direct form (JSON and SSE).
func TestMultiAgentChildFailureHandedBack(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		startChainAgent(t, s, "a", []string{"b"}, "")
		startChainAgent(t, s, "b", nil, "")
		fail := plan("", step{"say": "trying"}, step{"fail": "boom"})
		aPlan := plan("", step{"call": "b", "form": "tool", "message": fail}, step{"call": "b", "form": "json", "message": fail},
			step{"call": "b", "form": "sse", "message": fail}, step{"say": "carried on"})
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a", "message": map[string]any{"role": "user", "content": aPlan}})
		msgs := c.untilEnd()
		if got, want := deltaLines(msgs), []string{"error:sub_agent_failed", "error:boom", "error:boom", "carried on"}; !slices.Equal(got, want) {
			t.Fatalf("answer %q, want %q; messages %v", got, want, msgs)
		}
		if end := msgs[len(msgs)-1]; end["type"] != "done" {
			t.Fatalf("root ended %v", end)
		}
		n := 0
		for _, m := range msgs {
			if m["type"] == "sub_agent_error" {
				n++
				if sv(m, "code") != "boom" || sv(m, "agent_id") != "b" {
					t.Errorf("sub_agent_error %v", m)
				}
			}
		}
		if n != 3 {
			t.Errorf("%d sub_agent_error, want 3", n)
		}
		assertSettled(t, dsn)
	})
}

// TestMultiAgentDirectInvoke: the direct form's HTTP surface — 20
// concurrent invokes with one idempotency key start one child and all get
// its result; the same key over SSE replays the child's events from its
// start; the refusals and their codes.
func TestMultiAgentDirectInvoke(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		caller := startGoToolAgent(t, s, "caller")
		if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "caller", "endpoint": caller.srv.URL,
			"linked_agents": []string{"worker", "ghost"}}); code != http.StatusOK {
			t.Fatalf("link: %d %v", code, body)
		}
		startChainAgent(t, s, "worker", nil, "")
		startChainAgent(t, s, "stranger", nil, "")
		c := dial(t, s, "alice", "alice-key")
		c.invokeSpec("caller", "", map[string]any{"hold": true})
		rootID := caller.held(t)
		invoke := func(key, content string, hdr ...string) (int, map[string]any) {
			body := map[string]any{"message": map[string]any{"role": "user", "content": content}}
			if key != "" {
				body["idempotency_key"] = key
			}
			return s.call("POST", "/v1/agents/worker:invoke", caller.key, body, append([]string{"x-run-id", rootID}, hdr...)...)
		}

		var wg sync.WaitGroup
		results := make([]map[string]any, 20)
		codes := make([]int, 20)
		for i := range 20 {
			wg.Add(1)
			go func() { defer wg.Done(); codes[i], results[i] = invoke("same", "hello") }()
		}
		wg.Wait()
		for i := range 20 {
			if codes[i] != http.StatusOK || results[i]["status"] != "DONE" || results[i]["output"] != "echo:hello\n" || results[i]["run_id"] != results[0]["run_id"] {
				t.Fatalf("invoke %d: %d %v (first %v)", i, codes[i], results[i], results[0])
			}
		}
		childID := sv(results[0], "run_id")
		if kids := runOf(t, s, rootID)["children"].([]any); len(kids) != 1 || kids[0] != childID {
			t.Fatalf("children %v, want only %s", kids, childID)
		}
		if tu := obj(results[0], "total_usage"); tu == nil || tu["llm_calls"] != float64(0) {
			t.Errorf("total_usage %v", results[0]["total_usage"])
		}

		// The same key over SSE: the child's events again, from its start.
		req, _ := http.NewRequest("POST", s.URL+"/v1/agents/worker:invoke", strings.NewReader(`{"message":{"role":"user","content":"hello"},"idempotency_key":"same"}`))
		req.Header.Set("Authorization", "Bearer "+caller.key)
		req.Header.Set("x-run-id", rootID)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("SSE: %v %v", resp, err)
		}
		var names []string
		var last int64
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for event := ""; sc.Scan(); {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				event = v
				names = append(names, v)
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				var d map[string]any
				json.Unmarshal([]byte(v), &d)
				if sv(d, "run_id") != childID || sv(d, "parent_run_id") != rootID || sv(d, "type") != event || seqOf(d) <= last {
					t.Fatalf("SSE %s data %v", event, d)
				}
				last = seqOf(d)
				text.WriteString(sv(d, "text"))
				if event == "done" && (sv(d, "output") != "echo:hello\n" || sv(d, "status") != "DONE" || obj(d, "total_usage") == nil) {
					t.Fatalf("done %v", d)
				}
			}
		}
		resp.Body.Close()
		if names[0] != "run_started" || names[len(names)-1] != "done" || !slices.Contains(names, "delta") || text.String() != "echo:hello\n" {
			t.Fatalf("SSE events %v, text %q", names, text.String())
		}

		// Without a key every invoke is a new child; another message under a
		// used key is a conflict.
		invoke("", "one")
		invoke("", "two")
		if kids := runOf(t, s, rootID)["children"].([]any); len(kids) != 3 {
			t.Fatalf("children %v, want 3", kids)
		}
		if code, body := invoke("same", "not hello"); code != http.StatusConflict || errCode(body) != "idempotency_conflict" {
			t.Errorf("same key, other message: %d %v", code, body)
		}

		for name, tc := range map[string]struct {
			path, key, body string
			hdr             []string
			code            int
			err             string
		}{
			"not linked":          {"/v1/agents/stranger:invoke", caller.key, `{"message":{"role":"user","content":"hi"}}`, []string{"x-run-id", rootID}, 403, "agent_not_linked"},
			"no such agent":       {"/v1/agents/ghost:invoke", caller.key, `{"message":{"role":"user","content":"hi"}}`, []string{"x-run-id", rootID}, 404, "agent_not_found"},
			"another agent's run": {"/v1/agents/worker:invoke", caller.key, `{"message":{"role":"user","content":"hi"}}`, []string{"x-run-id", childID}, 403, "forbidden"},
			"no x-run-id":         {"/v1/agents/worker:invoke", caller.key, `{"message":{"role":"user","content":"hi"}}`, nil, 400, "missing_run_id"},
			"unknown field":       {"/v1/agents/worker:invoke", caller.key, `{"message":{"role":"user","content":"hi"},"stream":true}`, []string{"x-run-id", rootID}, 400, "invalid_json"},
			"not JSON":            {"/v1/agents/worker:invoke", caller.key, `{"message":`, []string{"x-run-id", rootID}, 400, "invalid_json"},
			"no content":          {"/v1/agents/worker:invoke", caller.key, `{"message":{"role":"user"}}`, []string{"x-run-id", rootID}, 400, "invalid_message"},
			"not a user message":  {"/v1/agents/worker:invoke", caller.key, `{"message":{"role":"assistant","content":"hi"}}`, []string{"x-run-id", rootID}, 400, "invalid_message"},
			"user key":            {"/v1/agents/worker:invoke", "alice-key", `{"message":{"role":"user","content":"hi"}}`, []string{"x-run-id", rootID}, 403, "forbidden"},
			"no key":              {"/v1/agents/worker:invoke", "", `{"message":{"role":"user","content":"hi"}}`, []string{"x-run-id", rootID}, 401, "unauthorized"},
		} {
			t.Run(name, func(t *testing.T) {
				code, body := s.call("POST", tc.path, tc.key, tc.body, tc.hdr...)
				if code != tc.code || errCode(body) != tc.err {
					t.Fatalf("%d %v, want %d %s", code, body, tc.code, tc.err)
				}
			})
		}
		if kids := runOf(t, s, rootID)["children"].([]any); len(kids) != 3 {
			t.Fatalf("refused invokes started children: %v", kids)
		}

		caller.releaseAll()
		if run := waitRunEnded(t, s, rootID); sv(run, "status") != "DONE" {
			t.Fatalf("root ended %v", run)
		}
		if code, body := invoke("late", "hi"); code != http.StatusConflict || errCode(body) != "run_not_active" {
			t.Errorf("invoke from an ended run: %d %v", code, body)
		}
		assertSettled(t, dsn)
	})
}

// TestMultiAgentKillMidChild: the server is killed (-9) while a child of
// the tool form runs; restarted on the same database, it fails the child
// (platform_restarted) and its caller, settles the caller's call_b tool
// call from the child's end, and nothing is left waiting.
func TestMultiAgentKillMidChild(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		probe := newToolProbe(t)
		rep := &reports{p: probe}
		startChainAgent(t, s, "a", []string{"b"}, "")
		startChainAgent(t, s, "b", nil, "")
		bPlan := plan(probe.reportURL(), step{"say": "working"}, step{"hold": true})
		aPlan := plan("", step{"call": "b", "form": "tool", "message": bPlan})
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a", "message": map[string]any{"role": "user", "content": aPlan}})
		rootID, sid := "", ""
		for rootID == "" {
			if m := c.next(); m["type"] == "run_started" {
				rootID, sid = sv(m, "run_id"), sv(m, "session_id")
			}
		}
		childID := sv(rep.until(t, "b invoked", reported("b", "invoked")), "run_id")

		s.kill()
		s.restart()
		for _, id := range []string{childID, rootID} {
			run := waitRunEnded(t, s, id)
			if sv(run, "status") != "FAILED" || sv(obj(run, "error"), "code") != "platform_restarted" {
				t.Errorf("run %s ended %v %v", id, run["status"], run["error"])
			}
		}
		evs := sessionEvents(t, s, sid)
		if cs, rs := firstSeq(evs, childID, "run_failed"), firstSeq(evs, rootID, "run_failed"); cs == 0 || cs > rs {
			t.Errorf("the child failed at %d, its parent at %d", cs, rs)
		}
		var callID string
		for _, e := range evs {
			if e.RunID == rootID && e.Type == "tool_call_created" {
				var p map[string]any
				json.Unmarshal(e.Payload, &p)
				callID = sv(p, "tool_call_id")
			}
		}
		tc := toolCall(t, s, callID)
		if sv(tc, "state") != "FAILED" || sv(obj(tc, "error"), "code") != "sub_agent_failed" || sv(obj(obj(tc, "error"), "detail"), "code") != "platform_restarted" {
			t.Errorf("call_b after the restart: %v", tc)
		}
		// A wait on it answers at once.
		began := time.Now()
		if code, v := s.call("POST", "/v1/tool_calls/"+callID+":wait?timeout_ms=60000", adminKey, nil); code != http.StatusOK || v["status"] != "failed" || time.Since(began) > 30*time.Second {
			t.Errorf(":wait %d %v after %v", code, v, time.Since(began))
		}
		// The restarted server serves the session's client as before.
		c2 := dial(t, s, "alice", "alice-key")
		c2.send(map[string]any{"type": "subscribe", "request_id": "s", "session_id": sid, "after_seq": 0})
		var types []string
		for {
			m := c2.next()
			types = append(types, sv(m, "type"))
			if isEnd(m) && sv(m, "run_id") == rootID {
				break
			}
		}
		if !slices.Contains(types, "sub_agent_error") {
			t.Errorf("replay after the restart: %v", types)
		}
		assertSettled(t, dsn)
	})
}

// TestMultiAgentAcrossReplicas: two replicas on one PostgreSQL database.
// The root runs on replica A; its agent talks to replica B, so its child
// is started and driven there. Cancelling the root on A ends the child in
// A's transaction, and B, hearing of it through the notification, closes
// the child's agent request.
func TestMultiAgentAcrossReplicas(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	ra := startServer(t, dsn, "--instance-id", "replica-a")
	rb := startServer(t, dsn, "--instance-id", "replica-b")
	probe := newToolProbe(t)
	rep := &reports{p: probe}
	startChainAgent(t, rb, "a", []string{"b"}, "") // a's calls go to replica B
	startChainAgent(t, rb, "b", nil, "")
	bPlan := plan(probe.reportURL(), step{"say": "working"}, step{"hold": true})
	aPlan := plan(probe.reportURL(), step{"call": "b", "form": "tool", "message": bPlan})
	c := dial(t, ra, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a", "message": map[string]any{"role": "user", "content": aPlan}})
	rootID := ""
	for rootID == "" {
		if m := c.next(); m["type"] == "run_started" {
			rootID = sv(m, "run_id")
		}
	}
	childID := sv(rep.until(t, "b invoked", reported("b", "invoked")), "run_id")
	c.send(map[string]any{"type": "cancel_run", "request_id": "cancel", "run_id": rootID})
	rep.until(t, "the child's request closed by replica B", reportedRun(childID, "closed"))
	rep.until(t, "the root's request closed by replica A", reportedRun(rootID, "closed"))
	for _, id := range []string{childID, rootID} {
		if run := waitRunEnded(t, ra, id); sv(run, "status") != "CANCELLED" {
			t.Errorf("run %s ended %v", id, run["status"])
		}
	}
	assertSettled(t, dsn)
}
