package toolsvc

// call_<agent> tools (issue 9, DESIGN §11): a tool call whose execution is
// a child run, against real HTTP agents driven by the real run manager,
// on both stores.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
)

// childAgent is a real HTTP agent: it answers every invoke with fn's
// events, and reports each invoke's run id and the closing of its request.
type childAgent struct {
	invoked chan string
	closed  chan string
	stop    chan struct{}
}

// agentEvents writes an agent's SSE answer; hold blocks until the
// platform closes the request.
type agentEvents struct {
	w    http.ResponseWriter
	ctx  context.Context
	stop chan struct{}
}

func (e *agentEvents) send(event, data string) {
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, data)
	http.NewResponseController(e.w).Flush()
}

func (e *agentEvents) hold() {
	e.send("state", `{"state":"holding","detail":{}}`)
	select {
	case <-e.ctx.Done():
	case <-e.stop:
	}
}

// registerAgent registers id with links, served by fn (nil: the agent
// exists but is never reached).
func (h *harness) registerAgent(id string, links []string, fn func(e *agentEvents, body map[string]any)) *childAgent {
	h.t.Helper()
	ca := &childAgent{invoked: make(chan string, 16), closed: make(chan string, 16), stop: make(chan struct{})}
	endpoint := "http://127.0.0.1:1"
	if fn != nil {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			raw, _ := io.ReadAll(r.Body)
			var body map[string]any
			json.Unmarshal(raw, &body)
			id, _ := body["run_id"].(string)
			ca.invoked <- id
			w.Header().Set("Content-Type", "text/event-stream")
			fn(&agentEvents{w: w, ctx: r.Context(), stop: ca.stop}, body)
			if r.Context().Err() != nil {
				ca.closed <- id
			}
		}))
		h.t.Cleanup(func() { close(ca.stop); srv.Close() })
		endpoint = srv.URL
	}
	linked, _ := json.Marshal(links)
	if _, err := h.st.AgentUpsert(h.ctx, &store.AgentUpsertParams{AgentID: id, Name: "Agent " + strings.ToUpper(id), Description: "does " + id + " things",
		Endpoint: endpoint, LinkedAgents: linked, KeyHash: "hash-" + id, At: time.Now().UnixMilli()}); err != nil {
		h.t.Fatal(err)
	}
	return ca
}

func (ca *childAgent) waitInvoked(t *testing.T) string {
	t.Helper()
	select {
	case id := <-ca.invoked:
		return id
	case <-time.After(20 * time.Second):
		t.Fatal("the agent was never invoked")
		return ""
	}
}

func (ca *childAgent) waitClosed(t *testing.T, runID string) {
	t.Helper()
	select {
	case id := <-ca.closed:
		if id != runID {
			t.Fatalf("closed %s, want %s", id, runID)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the request of %s was never closed", runID)
	}
}

// answer is an agent that says text and finishes with usage.
func answer(text string) func(e *agentEvents, body map[string]any) {
	return func(e *agentEvents, body map[string]any) {
		in, _ := body["input_message"].(map[string]any)
		e.send("delta", fmt.Sprintf(`{"text":%q}`, text+" to "+fmt.Sprint(in["content"])))
		e.send("done", `{"usage":{"total_tokens":7}}`)
	}
}

func childOf(t *testing.T, h *harness, parent *store.Run) *store.Run {
	t.Helper()
	kids, err := h.st.RunListChildren(h.ctx, parent.RunID)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %v, %v", parent.RunID, kids, err)
	}
	return kids[0]
}

func waitRunEnded(t *testing.T, h *harness, runID string) *store.Run {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if r := h.runStatus(runID); store.RunIsTerminal(r.Status) {
			return r
		}
	}
	t.Fatalf("run %s did not end", runID)
	return nil
}

func TestAgentToolCallSucceeds(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b"}, nil)
		h.registerAgent("agent-b", nil, answer("hello"))
		r := h.newRun()
		v, err := h.invoke(r, "call_agent-b", `{"message":"world"}`, "step-1")
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != StatusSucceeded {
			t.Fatalf("call = %+v (%v)", v, v.Error)
		}
		child := childOf(t, h, r)
		var res struct {
			Output string          `json:"output"`
			RunID  string          `json:"run_id"`
			Usage  json.RawMessage `json:"usage"`
		}
		json.Unmarshal(v.Result, &res)
		if res.Output != "hello to world" || res.RunID != child.RunID || !strings.Contains(string(res.Usage), "total_tokens") {
			t.Fatalf("result %s", v.Result)
		}
		if child.ToolCallID != v.ToolCallID || child.ChildKey != "tool:"+v.ToolCallID || child.Depth != 1 || child.Status != store.RunDone || child.AgentID != "agent-b" {
			t.Fatalf("child %+v", child)
		}
		// The same key is the same call: no second child.
		again, err := h.invoke(r, "call_agent-b", `{"message":"world"}`, "step-1")
		if err != nil || again.ToolCallID != v.ToolCallID {
			t.Fatalf("retry = %+v, %v", again, err)
		}
		if kids, _ := h.st.RunListChildren(h.ctx, r.RunID); len(kids) != 1 {
			t.Fatalf("%d children after a retry", len(kids))
		}
		c := h.call(v.ToolCallID)
		if c.Kind != store.ToolKindAgent || c.TimeoutMS != 0 || c.Attempts != 1 {
			t.Fatalf("call row %+v", c)
		}
		types := h.eventTypes(r.RunID)
		want := []string{"tool_call_created", "policy_decision", "tool_dispatched", "agent_called_child", "tool_result"}
		if strings.Join(types, ",") != strings.Join(want, ",") {
			t.Fatalf("parent events %v, want %v", types, want)
		}
		// The call finished in the child's terminal transaction: its
		// tool_result comes right after the child's run_done.
		evs, _ := h.st.EventsList(h.ctx, &store.EventsListParams{SessionID: r.SessionID, Limit: 100})
		last := evs[len(evs)-2:]
		if last[0].RunID != child.RunID || last[0].Type != eventlog.TypeRunDone || last[1].Type != eventlog.TypeToolResult {
			t.Fatalf("last events %s/%s then %s", last[0].RunID, last[0].Type, last[1].Type)
		}
		if r := h.runStatus(r.RunID); r.Status != store.RunRunning {
			t.Fatalf("parent is %s", r.Status)
		}
		h.finish()
	})
}

func TestAgentToolCallRefusals(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b", "agent-c"}, nil)
		h.registerAgent("agent-b", []string{"agent-c"}, nil)
		h.registerAgent("agent-c", []string{"agent-d"}, nil)
		h.registerAgent("agent-d", nil, nil)
		h.registerAgent("agent-x", nil, nil)
		r := h.newRun()
		for name, tc := range map[string]struct {
			tool, args, code string
		}{
			"not linked":     {"call_agent-x", `{"message":"hi"}`, "agent_not_linked"},
			"no such agent":  {"call_agent-zz", `{"message":"hi"}`, "tool_not_found"},
			"no message":     {"call_agent-b", `{}`, "invalid_args"},
			"extra argument": {"call_agent-b", `{"message":"hi","x":1}`, "invalid_args"},
		} {
			_, err := h.invoke(r, tc.tool, tc.args, "")
			var e *respond.Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Errorf("%s: %v, want %s", name, err, tc.code)
			}
		}
		// MaxCallDepth is 2 in the harness: a run at depth 2 may not call.
		deep := r
		for _, id := range []string{"agent-b", "agent-c"} {
			c, err := h.st.RunInsert(h.ctx, &store.RunInsertParams{RunID: id + "-run", SessionID: r.SessionID, AgentID: id, ParentRunID: deep.RunID,
				RootRunID: r.RunID, Depth: deep.Depth + 1, UserID: "alice", Owner: "test", StartedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			deep = c
		}
		_, err := h.svc.Invoke(h.ctx, InvokeParams{AgentID: "agent-c", RunID: deep.RunID, ToolName: "call_agent-d", Args: json.RawMessage(`{"message":"hi"}`)})
		var e *respond.Error
		if !errors.As(err, &e) || e.Code != "max_depth_exceeded" || e.Status != http.StatusConflict {
			t.Fatalf("too deep: %v", err)
		}
		if calls, _ := h.st.ToolCallListActiveByRun(h.ctx, r.RunID); len(calls) != 0 {
			t.Fatalf("refused calls left %d calls", len(calls))
		}
		h.finish()
	})
}

// A child that fails is handed back to the agent (return_to_agent):
// sub_agent_failed with the child's error as detail, the run goes on. An
// override with on_failure fail_run fails the run instead.
func TestAgentToolCallFailure(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b"}, nil)
		h.registerAgent("agent-b", nil, func(e *agentEvents, _ map[string]any) {
			e.send("error", `{"code":"boom","message":"it broke"}`)
		})
		r := h.newRun()
		v, err := h.invoke(r, "call_agent-b", `{"message":"try"}`, "")
		if err != nil {
			t.Fatal(err)
		}
		var detail map[string]any
		json.Unmarshal(v.Error.Detail, &detail)
		if v.Status != StatusFailed || v.Error.Code != "sub_agent_failed" || detail["code"] != "boom" || detail["run_id"] != childOf(t, h, r).RunID {
			t.Fatalf("call = %+v %s", v.Error, v.Error.Detail)
		}
		if got := h.runStatus(r.RunID); got.Status != store.RunRunning {
			t.Fatalf("run %s after a handed-back failure", got.Status)
		}
		h.finish()

		h.put(tool.Definition{Name: "call_agent-b", OnFailure: tool.OnFailureFailRun})
		r = h.newRun()
		if v, err = h.invoke(r, "call_agent-b", `{"message":"try"}`, ""); err != nil || v.Error == nil || v.Error.Code != "sub_agent_failed" {
			t.Fatalf("call = %+v, %v", v, err)
		}
		got := h.runStatus(r.RunID)
		if got.Status != store.RunFailed || !strings.Contains(string(got.Error), "sub_agent_failed") {
			t.Fatalf("run %s %s, want FAILED sub_agent_failed", got.Status, got.Error)
		}
		h.assertSettled()
	})
}

// An override asking for approval: the call waits, and the child starts
// only when approved, in the deciding transaction.
func TestAgentToolCallApproval(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b"}, nil)
		b := h.registerAgent("agent-b", nil, answer("approved"))
		h.put(tool.Definition{Name: "call_agent-b", Policy: tool.Policy{Decision: tool.DecisionRequireApproval}})
		r := h.newRun()
		v := h.mustInvoke(r, "call_agent-b", `{"message":"x"}`)
		if v.State != store.ToolCallWaitingApproval {
			t.Fatalf("call %s", v.State)
		}
		if kids, _ := h.st.RunListChildren(h.ctx, r.RunID); len(kids) != 0 {
			t.Fatal("a child started before the approval")
		}
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: "approve"}); err != nil {
			t.Fatal(err)
		}
		b.waitInvoked(t)
		done, err := h.svc.Wait(h.ctx, Caller{Admin: true}, v.ToolCallID, 20*time.Second)
		if err != nil || done.Status != StatusSucceeded || !strings.Contains(string(done.Result), "approved to x") {
			t.Fatalf("call = %+v, %v", done, err)
		}
		h.finish()
	})
}

// With a timeout (an override), a child that runs too long is stopped when
// its call times out; without one the sweeper never touches the call.
func TestAgentToolCallTimeout(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b"}, nil)
		b := h.registerAgent("agent-b", nil, func(e *agentEvents, _ map[string]any) { e.hold() })
		// The inline wait is cut short: the child holds.
		quick := func(r *store.Run) *CallView {
			ctx, cancel := context.WithTimeout(h.ctx, 300*time.Millisecond)
			defer cancel()
			v, err := h.svc.Invoke(ctx, InvokeParams{AgentID: r.AgentID, RunID: r.RunID, ToolName: "call_agent-b", Args: json.RawMessage(`{"message":"x"}`)})
			if err != nil || v.Status != StatusPending {
				t.Fatalf("invoke = %+v, %v", v, err)
			}
			return v
		}
		r := h.newRun()
		v := quick(r)
		childID := b.waitInvoked(t)
		h.skew.Store(10 * 3600_000)
		if n, _ := h.svc.Sweep(h.ctx); n != 0 {
			t.Fatalf("the sweeper settled %d calls with no deadline", n)
		}
		h.skew.Store(0)
		if c := h.call(v.ToolCallID); c.Status != store.ToolCallRunning || c.DeadlineAt != 0 {
			t.Fatalf("call %s deadline %d", c.Status, c.DeadlineAt)
		}
		h.finish() // cancelling the parent ends the child and the call
		b.waitClosed(t, childID)
		if c := h.call(v.ToolCallID); c.Status != store.ToolCallCancelled {
			t.Fatalf("call %s after the parent's cancel", c.Status)
		}
		if c := h.runStatus(childID); c.Status != store.RunCancelled || !strings.Contains(string(c.Error), "cancelled") {
			t.Fatalf("child %s %s", c.Status, c.Error)
		}

		h.put(tool.Definition{Name: "call_agent-b", TimeoutMS: 1000})
		r = h.newRun()
		v = quick(r)
		childID = b.waitInvoked(t)
		h.skew.Store(5000)
		if n, err := h.svc.Sweep(h.ctx); n != 1 || err != nil {
			t.Fatalf("sweep settled %d: %v", n, err)
		}
		b.waitClosed(t, childID)
		if c := h.call(v.ToolCallID); c.Status != store.ToolCallTimeout {
			t.Fatalf("call %s", c.Status)
		}
		if c := waitRunEnded(t, h, childID); c.Status != store.RunCancelled || !strings.Contains(string(c.Error), `"timeout"`) {
			t.Fatalf("child %s %s", c.Status, c.Error)
		}
		h.skew.Store(0)
		h.finish()
	})
}

// Cancelling a call_<agent> call (POST /v1/tool_calls/{id}:cancel, or the
// /mcp client's notifications/cancelled) stops its child run with it: the
// child ends CANCELLED in the call's commit and its agent's request closes.
func TestAgentToolCallCancelEndsTheChild(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b"}, nil)
		b := h.registerAgent("agent-b", nil, func(e *agentEvents, _ map[string]any) { e.hold() })
		r := h.newRun()
		ctx, cancel := context.WithTimeout(h.ctx, 300*time.Millisecond)
		v, err := h.svc.Invoke(ctx, InvokeParams{AgentID: r.AgentID, RunID: r.RunID, ToolName: "call_agent-b", Args: json.RawMessage(`{"message":"x"}`)})
		cancel()
		if err != nil || v.Status != StatusPending {
			t.Fatalf("invoke = %+v, %v", v, err)
		}
		childID := b.waitInvoked(t)
		got, err := h.svc.Cancel(h.ctx, Caller{AgentID: "agent-a"}, v.ToolCallID, "changed my mind")
		if err != nil || got.State != store.ToolCallCancelled {
			t.Fatalf("cancel = %+v, %v", got, err)
		}
		if c := h.runStatus(childID); c.Status != store.RunCancelled || !strings.Contains(string(c.Error), `"cancelled"`) || !strings.Contains(string(c.Error), "changed my mind") {
			t.Fatalf("child %s %s after its call was cancelled", c.Status, c.Error)
		}
		b.waitClosed(t, childID)
		if c := h.runStatus(r.RunID); c.Status != store.RunRunning {
			t.Fatalf("parent %s after cancelling its call, want it running on", c.Status)
		}
		h.finish()
	})
}

// GET /v1/tools?run_id= for an agent: call_<agent> for each registered
// linked agent, described by its name and description (or the override's).
func TestToolsForAgentListsLinkedAgents(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b", "agent.c", "ghost"}, nil)
		h.registerAgent("agent-b", nil, nil)
		h.registerAgent("agent.c", nil, nil)
		h.registerAgent("agent-x", []string{}, nil)
		h.put(tool.Definition{Name: "search", Kind: tool.KindClient})
		h.put(tool.Definition{Name: "call_agent-b", Description: "the override"})
		list, err := h.svc.ToolsForAgent(h.ctx, "agent-a")
		if err != nil {
			t.Fatal(err)
		}
		var names, descs []string
		for _, tl := range list {
			fn := tl["function"].(map[string]any)
			names = append(names, fn["name"].(string))
			descs = append(descs, fn["description"].(string))
		}
		if strings.Join(names, ",") != "search,call_agent-b,call_agent__c" {
			t.Fatalf("tools %v", names)
		}
		if descs[1] != "the override" || descs[2] != "Ask the agent Agent AGENT.C: does agent.c things" {
			t.Fatalf("descriptions %q", descs)
		}
		list, _ = h.svc.ToolsForAgent(h.ctx, "agent-x")
		if len(list) != 1 {
			t.Fatalf("agent-x sees %d tools, want only search", len(list))
		}
		// The override's kind is agent, its parameters fixed.
		for name, d := range map[string]tool.Definition{
			"server kind":  {Name: "call_agent-b", Kind: tool.KindServer, Endpoint: "http://127.0.0.1:9"},
			"parameters":   {Name: "call_agent-b", Parameters: json.RawMessage(`{"type":"object"}`)},
			"agents":       {Name: "call_agent-b", Agents: []string{"agent-a"}},
			"agent kind":   {Name: "not_a_call", Kind: tool.KindAgent},
			"bad timeouts": {Name: "call_agent-b", TimeoutMS: -1},
		} {
			if _, _, err := h.svc.PutTool(h.ctx, d); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	})
}

// A dotted agent id is listed with its OpenAI spelling (call_team__weather):
// that spelling invokes the agent as the dotted one does, and the call is
// recorded under the agent's own name.
func TestAgentToolCallBothSpellings(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"team.weather"}, nil)
		weather := h.registerAgent("team.weather", nil, answer("sunny"))
		r := h.newRun()
		for _, tc := range []struct {
			name, want string
			ca         *childAgent
		}{
			{"call_team__weather", "call_team.weather", weather},
			{"call_team.weather", "call_team.weather", weather},
		} {
			v, err := h.invoke(r, tc.name, `{"message":"here"}`, "")
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if child := tc.ca.waitInvoked(t); child == "" {
				t.Fatalf("%s: no child run", tc.name)
			}
			if v.Status != StatusSucceeded || v.ToolName != tc.want {
				t.Fatalf("%s: %+v (%s)", tc.name, v, v.Error)
			}
			if c := h.call(v.ToolCallID); c.ToolName != tc.want {
				t.Fatalf("%s: recorded as %s", tc.name, c.ToolName)
			}
		}
		if _, err := h.invoke(r, "call_team__rain", `{"message":"here"}`, ""); !errors.Is(err, ErrToolNotFound) {
			t.Fatalf("an unknown agent: %v", err)
		}
		h.finish()
	})
}

// TestAgentToolCallInputRequired: a child that asks back (issue 10) settles
// its call_<agent> call SUCCEEDED with {status:"input_required", question,
// run_id} — the caller decides what to do — and the caller's next call of
// that agent (same intention) resumes the child's question.
func TestAgentToolCallInputRequired(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.registerAgent("agent-a", []string{"agent-b"}, nil)
		bodies := make(chan map[string]any, 4)
		h.registerAgent("agent-b", nil, func(e *agentEvents, body map[string]any) {
			bodies <- body
			if body["resumes_run_id"] == nil {
				e.send("input_required", `{"question":"Which city?","detail":{"k":1}}`)
				return
			}
			e.send("delta", `{"text":"sunny"}`)
			e.send("done", `{}`)
		})
		r := h.newRun()
		v, err := h.invoke(r, "call_agent-b", `{"message":"weather"}`, "")
		if err != nil {
			t.Fatal(err)
		}
		child := childOf(t, h, r)
		if v.Status != StatusSucceeded || !jsonEq(v.Result, `{"status":"input_required","question":"Which city?","detail":{"k":1},"run_id":"`+child.RunID+`"}`) {
			t.Fatalf("call = %+v %s", v, v.Result)
		}
		if child = waitRunEnded(t, h, child.RunID); child.Status != store.RunInputRequired || child.IntentionID != r.IntentionID {
			t.Fatalf("child %+v", child)
		}
		if st := h.runStatus(r.RunID); st.Status != store.RunRunning {
			t.Fatalf("the caller is %s", st.Status)
		}
		v2, err := h.invoke(r, "call_agent-b", `{"message":"Paris"}`, "")
		if err != nil || v2.Status != StatusSucceeded || !strings.Contains(string(v2.Result), `"output":"sunny"`) {
			t.Fatalf("second call = %+v %v", v2, err)
		}
		<-bodies
		second := <-bodies
		if second["resumes_run_id"] != child.RunID || second["intention_id"] != r.IntentionID {
			t.Errorf("the second child's body %v", second)
		}
		h.finish()
	})
}

func jsonEq(got json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}
