package toolsvc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
)

func code(err error) string {
	var e *respond.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "unexpected:" + err.Error()
	}
	return ""
}

const amountSchema = `{"type":"object","required":["amount","to"],"properties":{"amount":{"type":"number"},"to":{"type":"string"}},"additionalProperties":false}`

func transferTool(onFailure string) tool.Definition {
	return tool.Definition{
		Name: "payments.transfer", Description: "Move money.", Parameters: json.RawMessage(amountSchema), OnFailure: onFailure,
		Policy: tool.Policy{Decision: tool.DecisionAllow, Rules: []tool.Rule{
			{Name: "sanctioned", When: `args.to in ["mallory"]`, Decision: tool.DecisionBlock},
			{Name: "large", When: "args.amount > 100", Decision: tool.DecisionRequireApproval},
		}},
	}
}

// An allowed server tool answers succeeded from invoke itself: one POST
// with Idempotency-Key = tool_call_id, the events in order, the run still
// running.
func TestServerToolSucceedsInline(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		r := h.newRun()
		v := h.mustInvoke(r, "payments.transfer", `{"to":"bob","amount":50}`)
		if v.Status != StatusSucceeded || v.State != store.ToolCallSucceeded {
			t.Fatalf("invoke = %+v", v)
		}
		var res struct{ Echo map[string]any }
		json.Unmarshal(v.Result, &res)
		if res.Echo["to"] != "bob" {
			t.Fatalf("result %s", v.Result)
		}
		if n := h.executions(v.ToolCallID); n != 1 {
			t.Fatalf("tool ran %d times", n)
		}
		if h.keys[v.ToolCallID] != v.ToolCallID {
			t.Fatalf("Idempotency-Key %q", h.keys[v.ToolCallID])
		}
		want := []string{"tool_call_created", "policy_decision", "tool_dispatched", "tool_result"}
		if got := h.eventTypes(r.RunID); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		if s := h.runStatus(r.RunID).Status; s != store.RunRunning {
			t.Fatalf("run %s", s)
		}
		got, err := h.svc.Get(h.ctx, Caller{AgentID: "agent-a"}, v.ToolCallID)
		if err != nil || got.Status != StatusSucceeded {
			t.Fatalf("get %+v %v", got, err)
		}
		if _, err := h.svc.Get(h.ctx, Caller{AgentID: "agent-b"}, v.ToolCallID); code(err) != "tool_call_not_found" {
			t.Fatalf("another agent's get: %v", err)
		}
		h.finish()
	})
}

// Args are validated against the schema; unknown tools, other agents' runs
// and ended runs are refused; nothing is stored for a refused call.
func TestInvokeRefusals(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		d := transferTool("")
		d.Name, d.Agents = "restricted", []string{"someone-else"}
		h.put(d)
		r := h.newRun()
		cases := []struct{ tool, args, code string }{
			{"payments.transfer", `{"to":"bob"}`, "invalid_args"},
			{"payments.transfer", `{"to":"bob","amount":"ten"}`, "invalid_args"},
			{"payments.transfer", `{"to":"bob","amount":1,"extra":true}`, "invalid_args"},
			{"payments.transfer", `[1]`, "invalid_args"},
			{"nope", `{}`, "tool_not_found"},
			{"restricted", `{"to":"bob","amount":1}`, "forbidden"},
		}
		for _, c := range cases {
			if _, err := h.invoke(r, c.tool, c.args, ""); code(err) != c.code {
				t.Errorf("%s %s: %v, want %s", c.tool, c.args, err, c.code)
			}
		}
		other := *r
		other.AgentID = "agent-b"
		if _, err := h.invoke(&other, "payments.transfer", `{"to":"bob","amount":1}`, ""); code(err) != "forbidden" {
			t.Errorf("another agent's run: %v", err)
		}
		if evs := h.eventTypes(r.RunID); len(evs) != 0 {
			t.Errorf("refused calls logged %v", evs)
		}
		h.finish()
		_, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":1}`, "")
		if e := respond.As(err); e == nil || e.Code != "run_not_active" || e.Status != http.StatusConflict || e.Details["status"] != h.runStatus(r.RunID).Status {
			t.Errorf("ended run: %v (%+v), want run_not_active with the run's status", err, e)
		}
		h.assertSettled()
	})
}

// 100 concurrent invokes with one idempotency key make one call that runs
// once; the key with other args is a 409; a key is scoped to its run.
func TestIdempotentInvoke(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		r := h.newRun()
		var wg sync.WaitGroup
		ids := make([]string, 100)
		errs := make([]error, 100)
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Key order differs: still the same args.
				args := `{"to":"bob","amount":50}`
				if i%2 == 1 {
					args = `{"amount":50, "to":"bob"}`
				}
				v, err := h.invoke(r, "payments.transfer", args, "key-1")
				errs[i] = err
				if v != nil {
					ids[i] = v.ToolCallID
				}
			}()
		}
		wg.Wait()
		for i := range 100 {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Fatalf("invoke %d: id %s err %v (first %s)", i, ids[i], errs[i], ids[0])
			}
		}
		if n := h.totalExecutions(); n != 1 {
			t.Fatalf("tool ran %d times", n)
		}
		v, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":50}`, "key-1")
		if err != nil || v.ToolCallID != ids[0] || v.Status != StatusSucceeded {
			t.Fatalf("replay after success: %+v %v", v, err)
		}
		if _, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":51}`, "key-1"); code(err) != "idempotency_conflict" {
			t.Fatalf("same key, other args: %v", err)
		}
		r2 := h.newRun()
		v2, err := h.invoke(r2, "payments.transfer", `{"to":"bob","amount":50}`, "key-1")
		if err != nil || v2.ToolCallID == ids[0] {
			t.Fatalf("key in another run: %+v %v", v2, err)
		}

		// A retry after the registry changed answers as the first try did:
		// the schema narrowed, the tool given to other agents, the tool
		// deleted (an external audit saw invalid_args, forbidden and
		// tool_not_found for a call that had run). A new key is refused.
		narrowed := transferTool("")
		narrowed.Parameters = json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","maximum":10}}}`)
		narrowed.Agents = []string{"someone-else"}
		h.put(narrowed)
		for _, name := range []string{"payments.transfer", "payments__transfer"} {
			if v, err := h.invoke(r, name, `{"amount":50,"to":"bob"}`, "key-1"); err != nil || v.ToolCallID != ids[0] || v.Status != StatusSucceeded {
				t.Fatalf("retry as %s after the tool changed: %+v %v", name, v, err)
			}
		}
		if _, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":50}`, "key-2"); code(err) != "forbidden" {
			t.Fatalf("a new key after the tool changed: %v", err)
		}
		if err := h.svc.DeleteTool(h.ctx, "payments.transfer"); err != nil {
			t.Fatal(err)
		}
		if v, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":50}`, "key-1"); err != nil || v.ToolCallID != ids[0] || v.Status != StatusSucceeded {
			t.Fatalf("retry after the tool was deleted: %+v %v", v, err)
		}
		if _, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":52}`, "key-1"); code(err) != "idempotency_conflict" {
			t.Fatalf("same key, other args, tool deleted: %v", err)
		}
		if _, err := h.invoke(r, "payments.transfer", `{"to":"bob","amount":50}`, "key-3"); code(err) != "tool_not_found" {
			t.Fatalf("a new key after the tool was deleted: %v", err)
		}
		if n := h.totalExecutions(); n != 2 {
			t.Fatalf("tool ran %d times, want 2 (one per run)", n)
		}
		h.finish()
	})
}

// Policy: a CEL rule blocks, the default allows, another rule asks for an
// approval; a blocked call fails the run (fail_run) with the call's code,
// or only the call (return_to_agent).
func TestPolicyBlock(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		r := h.newRun()
		v := h.mustInvoke(r, "payments.transfer", `{"to":"mallory","amount":5}`)
		if v.Status != StatusFailed || v.Error.Code != "blocked" || !strings.Contains(v.Error.Message, "sanctioned") {
			t.Fatalf("blocked call %+v %+v", v, v.Error)
		}
		if h.totalExecutions() != 0 {
			t.Fatal("a blocked tool ran")
		}
		got := h.runStatus(r.RunID)
		var rerr map[string]string
		json.Unmarshal(got.Error, &rerr)
		if got.Status != store.RunFailed || rerr["code"] != "blocked" || rerr["tool_call_id"] != v.ToolCallID {
			t.Fatalf("run %s error %s", got.Status, got.Error)
		}
		evs := h.eventTypes(r.RunID)
		if evs[len(evs)-1] != "run_failed" || !slices.Contains(evs, "tool_result") {
			t.Fatalf("events %v", evs)
		}
		var pd struct{ Decision, Rule string }
		list, _ := h.st.EventsList(h.ctx, &store.EventsListParams{RunID: r.RunID, Type: "policy_decision"})
		json.Unmarshal(list[0].Payload, &pd)
		if pd.Decision != "block" || pd.Rule != "sanctioned" {
			t.Fatalf("policy_decision %s", list[0].Payload)
		}

		h.put(transferTool("return_to_agent"))
		r2 := h.newRun()
		v = h.mustInvoke(r2, "payments.transfer", `{"to":"mallory","amount":5}`)
		if v.Error == nil || v.Error.Code != "blocked" || h.runStatus(r2.RunID).Status != store.RunRunning {
			t.Fatalf("return_to_agent: %+v run %s", v, h.runStatus(r2.RunID).Status)
		}
		h.finish()
	})
}

// require_approval: the call waits (run PAUSED_WAITING_APPROVAL), approval
// dispatches it exactly once (run RUNNING again), a wait returns the result;
// a repeated approval returns the recorded one, a rejection after it 409.
func TestApprovalApprove(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		r := h.newRun()
		v := h.mustInvoke(r, "payments.transfer", `{"to":"bob","amount":150}`)
		if v.Status != StatusPending || v.State != store.ToolCallWaitingApproval || v.ApprovalID == "" {
			t.Fatalf("invoke %+v", v)
		}
		if s := h.runStatus(r.RunID).Status; s != store.RunPausedWaitingApproval {
			t.Fatalf("run %s", s)
		}
		pending, _ := h.svc.ListApprovals(h.ctx, store.ApprovalPending, 0)
		if len(pending) != 1 || pending[0].ApprovalID != v.ApprovalID || !strings.Contains(pending[0].ArgsSummary, "150") {
			t.Fatalf("pending %+v", pending)
		}
		waited := make(chan *CallView, 1)
		go func() {
			w, err := h.svc.Wait(h.ctx, Caller{AgentID: "agent-a"}, v.ToolCallID, 20*time.Second)
			if err != nil {
				t.Error(err)
			}
			waited <- w
		}()
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, UserID: "mallory", Decision: "approve"}); code(err) != "approval_not_found" {
			t.Fatalf("another user's decision: %v", err)
		}
		a, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, UserID: "alice", Decision: "approve", Reason: "ok"})
		if err != nil || a.Status != store.ApprovalApproved || a.DecidedBy != "alice" || a.DecidedAt == 0 {
			t.Fatalf("decide %+v %v", a, err)
		}
		w := <-waited
		if w.Status != StatusSucceeded {
			t.Fatalf("wait returned %+v", w)
		}
		if n := h.executions(v.ToolCallID); n != 1 {
			t.Fatalf("tool ran %d times", n)
		}
		again, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: "approve"})
		if err != nil || again.DecidedBy != "alice" {
			t.Fatalf("repeat approve: %+v %v", again, err)
		}
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: "reject"}); code(err) != "approval_conflict" {
			t.Fatalf("conflicting decision: %v", err)
		}
		if n := h.executions(v.ToolCallID); n != 1 {
			t.Fatalf("tool ran %d times", n)
		}
		want := []string{"tool_call_created", "policy_decision", "approval_created", "state:PAUSED_WAITING_APPROVAL",
			"approval_decision", "state:RUNNING", "tool_dispatched", "tool_result"}
		if got := h.eventTypes(r.RunID); !slices.Equal(got, want) {
			t.Fatalf("events %v\nwant %v", got, want)
		}
		h.finish()
	})
}

// Rejection ends the call REJECTED and fails the run with code rejected;
// expiry ends it EXPIRED (distinct), and a decision after that is a 409.
func TestApprovalRejectAndExpire(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		r := h.newRun()
		v := h.mustInvoke(r, "payments.transfer", `{"to":"bob","amount":150}`)
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: "reject", Reason: "too much"}); err != nil {
			t.Fatal(err)
		}
		c := h.call(v.ToolCallID)
		got := View(c)
		if c.Status != store.ToolCallRejected || got.Error.Code != "rejected" || !strings.Contains(got.Error.Message, "too much") {
			t.Fatalf("rejected call %+v %+v", got, got.Error)
		}
		rr := h.runStatus(r.RunID)
		if rr.Status != store.RunFailed || !strings.Contains(string(rr.Error), `"rejected"`) {
			t.Fatalf("run %s %s", rr.Status, rr.Error)
		}

		d := transferTool("return_to_agent")
		d.ApprovalTimeoutMS = 60_000
		h.put(d)
		r2 := h.newRun()
		v = h.mustInvoke(r2, "payments.transfer", `{"to":"bob","amount":150}`)
		if n, _ := h.svc.Sweep(h.ctx); n != 0 {
			t.Fatalf("swept %d before the deadline", n)
		}
		h.skew.Store(61_000)
		if n, err := h.svc.Sweep(h.ctx); n != 1 || err != nil {
			t.Fatalf("sweep %d %v", n, err)
		}
		c = h.call(v.ToolCallID)
		if c.Status != store.ToolCallExpired || View(c).Error.Code != "expired" {
			t.Fatalf("expired call %s", c.Status)
		}
		ap, _ := h.st.ApprovalGet(h.ctx, v.ApprovalID)
		if ap.Status != store.ApprovalExpired {
			t.Fatalf("approval %s", ap.Status)
		}
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: "approve"}); code(err) != "approval_expired" {
			t.Fatalf("decision after expiry: %v", err)
		}
		if s := h.runStatus(r2.RunID).Status; s != store.RunRunning {
			t.Fatalf("return_to_agent run %s", s)
		}
		if h.totalExecutions() != 0 {
			t.Fatal("a rejected or expired tool ran")
		}
		h.finish()
	})
}

// A decision arriving after the deadline but before the sweeper expires
// the approval itself, and is refused.
func TestLateDecisionExpires(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		d := transferTool("return_to_agent")
		d.ApprovalTimeoutMS = 1000
		h.put(d)
		r := h.newRun()
		v := h.mustInvoke(r, "payments.transfer", `{"to":"bob","amount":150}`)
		h.skew.Store(2000)
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: "approve"}); code(err) != "approval_expired" {
			t.Fatalf("late approve: %v", err)
		}
		if c := h.call(v.ToolCallID); c.Status != store.ToolCallExpired {
			t.Fatalf("call %s", c.Status)
		}
		if h.totalExecutions() != 0 {
			t.Fatal("tool ran")
		}
		h.finish()
	})
}

// 50 concurrent approvers, rejecters and sweepers on one approval whose
// deadline is now: exactly one outcome is recorded and the tool runs at
// most once (exactly once if approval won).
func TestDecisionRace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		d := transferTool("return_to_agent")
		d.ApprovalTimeoutMS = 1000
		h.put(d)
		for round := range 3 {
			h.skew.Store(0)
			r := h.newRun()
			v := h.mustInvoke(r, "payments.transfer", `{"to":"bob","amount":150}`)
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins := map[string]int{}
			for i := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 25 && round > 0 {
						h.skew.Store(1500) // the deadline passes mid-race
					}
					switch i % 3 {
					case 0, 1:
						dec := []string{"approve", "reject"}[i%3]
						a, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: v.ApprovalID, Decision: dec, DecidedBy: fmt.Sprint("racer-", i)})
						if err == nil && a.DecidedBy == fmt.Sprint("racer-", i) {
							mu.Lock()
							wins[a.Status]++
							mu.Unlock()
						}
					case 2:
						if n, _ := h.svc.Sweep(h.ctx); n > 0 {
							mu.Lock()
							wins["EXPIRED"] += n
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			h.skew.Store(5000)
			h.svc.Sweep(h.ctx)
			total := 0
			for _, n := range wins {
				total += n
			}
			ap, _ := h.st.ApprovalGet(h.ctx, v.ApprovalID)
			c, _ := h.svc.Wait(h.ctx, Caller{Admin: true}, v.ToolCallID, 10*time.Second)
			if ap.Status == store.ApprovalExpired && wins["EXPIRED"] == 0 {
				// expired by the late decider's own check (not counted as a win)
				total++
			}
			if total != 1 {
				t.Fatalf("round %d: %d winners %v (approval %s)", round, total, wins, ap.Status)
			}
			runs := h.executions(v.ToolCallID)
			switch ap.Status {
			case store.ApprovalApproved:
				if runs != 1 || (c.State != store.ToolCallSucceeded && c.State != store.ToolCallTimeout) {
					t.Fatalf("approved: tool ran %d times, call %s", runs, c.State)
				}
			default:
				if runs != 0 {
					t.Fatalf("%s: tool ran %d times", ap.Status, runs)
				}
			}
		}
		h.finish()
	})
}

// What Pending sends again after a subscribe names a child run's parent,
// as the logged tool_request and approval_required did (DESIGN §11: a
// child's client tools and approvals reach the client as a root's do); a
// root run's carry no parent_run_id.
func TestPendingNamesTheParentRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(tool.Definition{Name: "client.now", Kind: tool.KindClient, TimeoutMS: 5000, Policy: tool.Policy{Decision: "allow"}})
		h.put(tool.Definition{Name: "client.ask", Kind: tool.KindClient, Policy: tool.Policy{Decision: "require_approval"}})
		root := h.newRun()
		child, err := h.st.RunInsert(h.ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: root.SessionID, AgentID: "agent-a", ParentRunID: root.RunID,
			RootRunID: root.RunID, Depth: 1, UserID: "alice", Owner: "test", StartedAt: time.Now().UnixMilli(), IntentionID: root.IntentionID})
		if err != nil {
			t.Fatal(err)
		}
		h.online.Store(root.SessionID, true)
		fromChild := h.mustInvoke(child, "client.now", `{}`)
		asked := h.mustInvoke(child, "client.ask", `{}`)
		fromRoot := h.mustInvoke(root, "client.now", `{}`)
		if fromChild.State != store.ToolCallWaitingClient || asked.State != store.ToolCallWaitingApproval || fromRoot.State != store.ToolCallWaitingClient {
			t.Fatalf("calls %s, %s, %s", fromChild.State, asked.State, fromRoot.State)
		}
		pending, err := h.svc.Pending(h.ctx, root.SessionID)
		if err != nil || len(pending) != 3 {
			t.Fatalf("pending %v, %v", pending, err)
		}
		for _, m := range pending {
			want := any(root.RunID)
			if m["run_id"] == root.RunID {
				want = nil
			}
			if m["parent_run_id"] != want {
				t.Errorf("%s of %s: parent_run_id %v, want %v", m["type"], m["run_id"], m["parent_run_id"], want)
			}
		}
	})
}

// Client tools: no connected client → client_offline at once; with one,
// the call waits (run PAUSED_WAITING_TOOL) for the client's tool_result;
// a duplicate, late or foreign result is refused and changes nothing.
func TestClientTool(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(tool.Definition{Name: "client.now", Kind: tool.KindClient, OnFailure: "return_to_agent", TimeoutMS: 5000, Policy: tool.Policy{Decision: "allow"}})
		r := h.newRun()
		v := h.mustInvoke(r, "client.now", `{}`)
		if v.Status != StatusFailed || v.Error.Code != "client_offline" {
			t.Fatalf("offline: %+v %+v", v, v.Error)
		}

		h.online.Store(r.SessionID, true)
		v = h.mustInvoke(r, "client.now", `{}`)
		if v.Status != StatusPending || v.State != store.ToolCallWaitingClient || v.DeadlineAt == 0 {
			t.Fatalf("online: %+v", v)
		}
		if s := h.runStatus(r.RunID).Status; s != store.RunPausedWaitingTool {
			t.Fatalf("run %s", s)
		}
		pending, _ := h.svc.Pending(h.ctx, r.SessionID)
		if len(pending) != 1 || pending[0]["type"] != "tool_request" || pending[0]["tool_call_id"] != v.ToolCallID {
			t.Fatalf("pending %v", pending)
		}
		if _, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "mallory", ToolCallID: v.ToolCallID, OK: true}); code(err) != "tool_call_not_found" {
			t.Fatalf("foreign result: %v", err)
		}
		done, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "alice", RunID: r.RunID, ToolCallID: v.ToolCallID, OK: true, Result: json.RawMessage(`{"now":"12:00"}`)})
		if err != nil || done.Status != StatusSucceeded || !jsonEqual(done.Result, `{"now":"12:00"}`) {
			t.Fatalf("result: %+v %v", done, err)
		}
		if _, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "alice", ToolCallID: v.ToolCallID, OK: true, Result: json.RawMessage(`{"now":"13:00"}`)}); code(err) != "tool_call_not_waiting" {
			t.Fatalf("duplicate result: %v", err)
		}
		if c := h.call(v.ToolCallID); !jsonEqual(c.Result, `{"now":"12:00"}`) {
			t.Fatalf("duplicate changed the result: %s", c.Result)
		}
		if s := h.runStatus(r.RunID).Status; s != store.RunRunning {
			t.Fatalf("run %s", s)
		}

		// A client that reports failure; then one that never answers.
		v = h.mustInvoke(r, "client.now", `{}`)
		failed, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "alice", ToolCallID: v.ToolCallID, OK: false, Error: json.RawMessage(`{"code":"denied","message":"user said no"}`)})
		if err != nil || failed.Error.Code != "tool_error" || !strings.Contains(failed.Error.Message, "user said no") {
			t.Fatalf("client failure: %+v %v", failed, err)
		}
		v = h.mustInvoke(r, "client.now", `{}`)
		h.skew.Store(6000)
		if n, _ := h.svc.Sweep(h.ctx); n != 1 {
			t.Fatalf("swept %d", n)
		}
		if c := h.call(v.ToolCallID); c.Status != store.ToolCallTimeout {
			t.Fatalf("client timeout: %s", c.Status)
		}
		if _, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "alice", ToolCallID: v.ToolCallID, OK: true}); code(err) != "tool_call_not_waiting" {
			t.Fatalf("late result: %v", err)
		}
		// A result after the deadline but before the sweeper came round is
		// dropped too: the call times out then (an external audit saw most
		// such results taken as SUCCEEDED).
		v = h.mustInvoke(r, "client.now", `{}`)
		h.skew.Store(12000)
		if _, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "alice", ToolCallID: v.ToolCallID, OK: true, Result: json.RawMessage(`1`)}); code(err) != "tool_call_not_waiting" {
			t.Fatalf("result after the deadline: %v", err)
		}
		if c := h.call(v.ToolCallID); c.Status != store.ToolCallTimeout || c.Result != nil {
			t.Fatalf("result after the deadline: the call is %s %s", c.Status, c.Result)
		}
		if n, _ := h.svc.Sweep(h.ctx); n != 0 {
			t.Fatalf("swept %d after the late result timed the call out", n)
		}
		h.finish()
	})
}

// A server tool slower than its timeout ends TIMEOUT, runs once, and its
// late answer is dropped; a failing endpoint ends FAILED tool_http_error.
func TestServerToolTimeoutAndFailure(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		release := make(chan struct{})
		h.behave = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			if body["tool_name"] == "slow" {
				<-release
			}
			if body["tool_name"] == "broken" {
				http.Error(w, `{"error":"db down"}`, 500)
				return
			}
			w.Write([]byte(`{"ok":true}`))
		}
		h.put(tool.Definition{Name: "slow", TimeoutMS: 300, OnFailure: "return_to_agent", Policy: tool.Policy{Decision: "allow"}})
		h.put(tool.Definition{Name: "broken", OnFailure: "return_to_agent", Policy: tool.Policy{Decision: "allow"}})
		r := h.newRun()
		v := h.mustInvoke(r, "slow", `{}`)
		close(release)
		if v.Status != StatusFailed || v.Error.Code != "timeout" {
			t.Fatalf("slow: %+v %+v", v, v.Error)
		}
		if n := h.executions(v.ToolCallID); n != 1 {
			t.Fatalf("slow tool ran %d times", n)
		}
		v = h.mustInvoke(r, "broken", `{}`)
		if v.Status != StatusFailed || v.Error.Code != "tool_http_error" || !strings.Contains(string(v.Error.Detail), "db down") {
			t.Fatalf("broken: %+v %+v", v, v.Error)
		}
		h.finish()
	})
}

// Cancelling a run cancels its waiting calls and approvals in the same
// transaction; a decision on them afterwards is a 409 and nothing runs.
func TestCancelCascades(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(transferTool(""))
		h.put(tool.Definition{Name: "client.now", Kind: tool.KindClient, Policy: tool.Policy{Decision: "allow"}})
		r := h.newRun()
		h.online.Store(r.SessionID, true)
		ap := h.mustInvoke(r, "payments.transfer", `{"to":"bob","amount":500}`)
		cl := h.mustInvoke(r, "client.now", `{}`)
		waited := make(chan *CallView, 1)
		go func() {
			w, _ := h.svc.Wait(h.ctx, Caller{AgentID: "agent-a"}, ap.ToolCallID, 20*time.Second)
			waited <- w
		}()
		if _, err := h.runs.Cancel(h.ctx, run.CancelParams{RunID: r.RunID, UserID: "alice"}); err != nil {
			t.Fatal(err)
		}
		if w := <-waited; w.Error == nil || w.Error.Code != "cancelled" {
			t.Fatalf("wait after cancel: %+v", w)
		}
		for _, id := range []string{ap.ToolCallID, cl.ToolCallID} {
			if c := h.call(id); c.Status != store.ToolCallCancelled {
				t.Fatalf("call %s %s", id, c.Status)
			}
		}
		a, _ := h.st.ApprovalGet(h.ctx, ap.ApprovalID)
		if a.Status != store.ApprovalCancelled {
			t.Fatalf("approval %s", a.Status)
		}
		if _, err := h.svc.Decide(h.ctx, DecideParams{ApprovalID: ap.ApprovalID, Decision: "approve"}); code(err) != "approval_conflict" {
			t.Fatalf("approve after cancel: %v", err)
		}
		if _, err := h.svc.SubmitClientResult(h.ctx, ClientResult{UserID: "alice", ToolCallID: cl.ToolCallID, OK: true}); code(err) != "tool_call_not_waiting" {
			t.Fatalf("result after cancel: %v", err)
		}
		if h.totalExecutions() != 0 {
			t.Fatal("a tool ran")
		}
		evs := h.eventTypes(r.RunID)
		if evs[len(evs)-1] != "run_cancelled" {
			t.Fatalf("events %v", evs)
		}
		h.assertSettled()
	})
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// A server tool that was running when its run ended may have done its work:
// the call is recorded FAILED outcome_unknown (never a cancel that implies
// nothing happened), whether the run was cancelled or failed as orphaned by
// a dead process. A call that never reached its tool stays CANCELLED.
func TestRunEndWhileServerToolRunsIsOutcomeUnknown(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		for _, how := range []string{"cancelled", "orphaned"} {
			t.Run(how, func(t *testing.T) {
				h := newHarness(t, dialect)
				release := make(chan struct{})
				var once sync.Once
				unblock := func() { once.Do(func() { close(release) }) }
				t.Cleanup(unblock) // before the tool server closes
				h.behave = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
					<-release
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"sent":true}`))
				}
				h.put(transferTool("return_to_agent"))
				h.put(tool.Definition{Name: "queued.tool", Policy: tool.Policy{Decision: "allow"}})
				r := h.newRun()
				inline := make(chan *CallView, 1)
				go func() {
					v, _ := h.invoke(r, "payments.transfer", `{"to":"bob","amount":5}`, "")
					inline <- v
				}()
				callID := <-h.received // the POST reached the tool: the call is RUNNING
				if c := h.call(callID); c.Status != store.ToolCallRunning {
					t.Fatalf("call while its tool runs: %s", c.Status)
				}
				// A second server call dispatched but not yet claimed: it
				// was never sent (the claim precedes the POST).
				never := h.dispatchedCall(r, "queued.tool")

				switch how {
				case "cancelled":
					if _, err := h.runs.Cancel(h.ctx, run.CancelParams{RunID: r.RunID, UserID: "alice"}); err != nil {
						t.Fatal(err)
					}
				case "orphaned":
					// Another process finds the run's owner dead (no heartbeat)
					// and fails its run.
					other := run.New(h.log, run.Options{InstanceID: "other", Invoker: &agent.Client{}, OnEnd: h.svc.OnRunEnd, HeartbeatInterval: time.Hour})
					if err := other.Start(h.ctx); err != nil {
						t.Fatal(err)
					}
					defer other.Shutdown(h.ctx)
					if got := h.runStatus(r.RunID); got.Status != store.RunFailed {
						t.Fatalf("orphaned run %s", got.Status)
					}
				}
				c := h.call(callID)
				v := View(c)
				if c.Status != store.ToolCallFailed || v.Error == nil || v.Error.Code != "outcome_unknown" || !strings.Contains(v.Error.Message, "may have run") {
					t.Fatalf("running call after the run ended: %s %+v", c.Status, v.Error)
				}
				if w := <-inline; w == nil || w.Error == nil || w.Error.Code != "outcome_unknown" {
					t.Fatalf("the agent's invoke answered %+v", w)
				}
				if c := h.call(never.ToolCallID); c.Status != store.ToolCallCancelled {
					t.Fatalf("never-sent call after the run ended: %s", c.Status)
				}
				// The trace says the same as the row.
				evs, _ := h.st.EventsList(h.ctx, &store.EventsListParams{RunID: r.RunID, Type: eventlog.TypeToolResult, Limit: 100})
				states := map[string]string{}
				for _, e := range evs {
					var p struct {
						ToolCallID string `json:"tool_call_id"`
						State      string `json:"state"`
						Error      struct{ Code string }
					}
					json.Unmarshal(e.Payload, &p)
					states[p.ToolCallID] = p.State + ":" + p.Error.Code
				}
				if states[callID] != "FAILED:outcome_unknown" || states[never.ToolCallID] != "CANCELLED:cancelled" {
					t.Fatalf("tool_result events %v", states)
				}
				// The tool answers after all: the recorded outcome stays.
				unblock()
				time.Sleep(100 * time.Millisecond)
				if c := h.call(callID); c.Status != store.ToolCallFailed {
					t.Fatalf("late answer changed the call: %s", c.Status)
				}
				if h.executions(callID) != 1 || h.executions(never.ToolCallID) != 0 {
					t.Fatalf("executions %d / %d", h.executions(callID), h.executions(never.ToolCallID))
				}
				h.assertSettled()
			})
		}
	})
}
