package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// platform is the tool service over a real store, event log and run
// manager, with an MCP connection manager as its MCP source: calls of
// "{server}@{tool}" tools go through the tool call state machine.
type platform struct {
	t    *testing.T
	ctx  context.Context
	st   store.Store
	log  *eventlog.Log
	svc  *toolsvc.Service
	runs *run.Manager
	mcp  *mcpclient.Manager
}

func newPlatform(t *testing.T, dialect string) *platform {
	t.Helper()
	return newPlatformLogged(t, dialect, nil)
}

// newPlatformLogged is newPlatform with the tool service logging JSON
// lines to logs (nil: the default logger).
func newPlatformLogged(t *testing.T, dialect string, logs *logBuffer) *platform {
	t.Helper()
	p := &platform{t: t, ctx: context.Background(), st: testdb.Open(t, dialect)}
	p.log = eventlog.New(p.st, eventlog.Options{Origin: "test"})
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewJSONHandler(logs, nil))
	}
	p.svc = toolsvc.New(p.log, toolsvc.Options{SweepInterval: 50 * time.Millisecond, InlineWait: 5 * time.Second, Logger: logger})
	p.runs = run.New(p.log, run.Options{InstanceID: "test", Invoker: &agent.Client{}, OnEnd: p.svc.OnRunEnd, HeartbeatInterval: time.Hour})
	p.svc.SetRuns(p.runs)
	allow, _ := agent.ParseAllowlist("127.0.0.1/32")
	p.mcp = mcpclient.New(p.st, mcpclient.Options{Allow: allow, ReconcileInterval: 100 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	p.svc.SetMCP(p.mcp)
	if err := p.mcp.Start(p.ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.svc.Start(p.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.svc.Stop()
		p.mcp.Stop()
		p.log.Stop()
	})
	return p
}

func (p *platform) newRun(agentID string) *store.Run {
	p.t.Helper()
	now := time.Now().UnixMilli()
	sid := ids.New("ses")
	if _, err := p.st.SessionCreate(p.ctx, &store.SessionCreateParams{SessionID: sid, UserID: "alice", CreatedAt: now}); err != nil {
		p.t.Fatal(err)
	}
	r, err := p.st.RunInsert(p.ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: agentID, UserID: "alice", Owner: "test", StartedAt: now})
	if err != nil {
		p.t.Fatal(err)
	}
	return r
}

func (p *platform) invoke(r *store.Run, name, args string) (*toolsvc.CallView, error) {
	return p.svc.Invoke(p.ctx, toolsvc.InvokeParams{AgentID: r.AgentID, RunID: r.RunID, ToolName: name, Args: json.RawMessage(args)})
}

func (p *platform) wait(id string) *toolsvc.CallView {
	p.t.Helper()
	v, err := p.svc.Wait(p.ctx, toolsvc.Caller{Admin: true}, id, 30*time.Second)
	if err != nil {
		p.t.Fatal(err)
	}
	if v.Status == toolsvc.StatusPending {
		p.t.Fatalf("call %s still %s", id, v.State)
	}
	return v
}

func (p *platform) events(runID string) []store.Event {
	p.t.Helper()
	evs, err := p.st.EventsList(p.ctx, &store.EventsListParams{RunID: runID, Limit: 1000})
	if err != nil {
		p.t.Fatal(err)
	}
	return evs
}

func (p *platform) eventTypes(runID, callID string) []string {
	var out []string
	for _, e := range p.events(runID) {
		var pl struct {
			ToolCallID string `json:"tool_call_id"`
		}
		json.Unmarshal(e.Payload, &pl)
		if pl.ToolCallID == callID {
			out = append(out, e.Type)
		}
	}
	return out
}

func jsonNumber(raw []byte, key string) float64 {
	var m map[string]any
	json.Unmarshal(raw, &m)
	f, _ := m[key].(float64)
	return f
}

func errCode(err error) string {
	var re *respond.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// countPosts counts the tools/call requests the server got for a tool.
func (h *httpServer) countCalls(toolName string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.posts {
		if strings.Contains(p, `"method":"tools/call"`) && strings.Contains(p, `"name":"`+toolName+`"`) {
			n++
		}
	}
	return n
}

// MCP tools are offered and called like any tool: listed under both
// names, schema-checked, through the state machine with its events, their
// content kept; isError is tool_error with the content as detail.
func TestMCPToolCalls(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		srv := startHTTPServer(t)
		p := newPlatform(t, dialect)
		if _, _, err := p.mcp.Put(p.ctx, &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL(), Agents: []string{"agent-a"}}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p.mcp, "web", mcpclient.StatusConnected, 6)

		tools, err := p.svc.ToolsForAgent(p.ctx, "agent-a")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ft := range tools {
			names = append(names, ft["function"].(map[string]any)["name"].(string))
		}
		if !slices.Contains(names, "web--echo") || !slices.Contains(names, "web--media") {
			t.Fatalf("functions offered: %v", names)
		}
		if other, _ := p.svc.ToolsForAgent(p.ctx, "agent-b"); len(other) != 0 {
			t.Fatalf("agent-b, not in the server's agents, is offered %v", other)
		}
		info, err := p.svc.GetTool(p.ctx, "web@echo")
		if err != nil || info.Kind != tool.KindMCP || info.MCPServer != "web" || !strings.Contains(string(info.Parameters), `"text"`) || info.Policy.Decision != tool.DecisionAllow {
			t.Fatalf("GetTool: %+v %v", info, err)
		}

		r := p.newRun("agent-a")
		// The function spelling invokes the tool too.
		v, err := p.invoke(r, "web--echo", `{"text":"hi"}`)
		if err != nil || v.Status != toolsvc.StatusSucceeded || v.ToolName != "web@echo" {
			t.Fatalf("invoke: %+v %v", v, err)
		}
		var res struct {
			Content []map[string]any `json:"content"`
		}
		if err := json.Unmarshal(v.Result, &res); err != nil || len(res.Content) != 1 || res.Content[0]["text"] != "echo: hi" {
			t.Fatalf("result %s", v.Result)
		}
		if got, want := p.eventTypes(r.RunID, v.ToolCallID), []string{"tool_call_created", "policy_decision", "tool_dispatched", "tool_result"}; !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		for _, e := range p.events(r.RunID) {
			var pl struct{ Kind string }
			json.Unmarshal(e.Payload, &pl)
			if e.Type == eventlog.TypeToolCallCreated && pl.Kind != "mcp" {
				t.Fatalf("tool_call_created %s", e.Payload)
			}
		}

		v, err = p.invoke(r, "web@media", `{}`)
		var media struct {
			Content []struct {
				Type, MIMEType, Data string
				Resource             struct{ URI, Text string }
			}
		}
		if err != nil || v.Status != toolsvc.StatusSucceeded || json.Unmarshal(v.Result, &media) != nil || len(media.Content) != 3 ||
			media.Content[1].Type != "image" || media.Content[1].Data != "iVBORw0KGgo=" || media.Content[1].MIMEType != "image/png" ||
			media.Content[2].Type != "resource" || media.Content[2].Resource.URI != "file:///r.csv" || media.Content[2].Resource.Text != "a,b\n1,2\n" {
			t.Fatalf("media: %s %v", v.Result, err)
		}
		v, err = p.invoke(r, "web@weather", `{}`)
		var weather struct {
			StructuredContent map[string]any `json:"structuredContent"`
		}
		if err != nil || json.Unmarshal(v.Result, &weather) != nil || weather.StructuredContent["conditions"] != "sunny" || weather.StructuredContent["temp_c"] != 21.0 {
			t.Fatalf("weather: %s %v", v.Result, err)
		}

		// Args are checked against the server's schema before anything is sent.
		if _, err := p.invoke(r, "web@echo", `{"text":5}`); errCode(err) != "invalid_args" {
			t.Fatalf("bad args: %v", err)
		}
		if _, err := p.invoke(r, "web@nope", `{}`); errCode(err) != "tool_not_found" {
			t.Fatalf("unknown tool: %v", err)
		}
		if _, err := p.invoke(p.newRun("agent-b"), "web@echo", `{"text":"x"}`); errCode(err) != "forbidden" {
			t.Fatalf("agent-b: %v", err)
		}

		// isError: tool_error, and the content as the detail. The run's
		// on_failure (fail_run by default) applies.
		v, err = p.invoke(r, "web@echo", `{"text":"fail"}`)
		if err != nil || v.Status != toolsvc.StatusFailed || v.Error.Code != "tool_error" || !strings.Contains(string(v.Error.Detail), "failed on purpose") {
			t.Fatalf("isError: %+v %v", v, err)
		}
		if st, _ := p.st.RunGet(p.ctx, r.RunID); st.Status != store.RunFailed || !strings.Contains(string(st.Error), "tool_error") {
			t.Fatalf("run after a failed call: %+v", st)
		}
		if n := srv.countCalls("echo"); n != 2 {
			t.Fatalf("echo was called %d times, want 2 (the bad args never left)", n)
		}
	})
}

// A per-tool override puts an MCP tool behind an approval: approved, it
// runs exactly once; rejected, never. The server's policy otherwise.
func TestMCPToolApproval(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		srv := startHTTPServer(t)
		p := newPlatform(t, dialect)
		// The server's default: anything with text "big" needs approval.
		if _, _, err := p.mcp.Put(p.ctx, &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL(), OnFailure: tool.OnFailureReturnToAgent,
			Policy: tool.Policy{Decision: tool.DecisionAllow, Rules: []tool.Rule{{Name: "big", When: `tool_name == "web@echo" && args.text == "big"`, Decision: tool.DecisionRequireApproval}}}}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p.mcp, "web", mcpclient.StatusConnected, 6)
		r := p.newRun("agent-a")

		v, err := p.invoke(r, "web@echo", `{"text":"big"}`)
		if err != nil || v.State != store.ToolCallWaitingApproval {
			t.Fatalf("big: %+v %v", v, err)
		}
		if st, _ := p.st.RunGet(p.ctx, r.RunID); st.Status != store.RunPausedWaitingApproval {
			t.Fatalf("run %s", st.Status)
		}
		if _, err := p.svc.Decide(p.ctx, toolsvc.DecideParams{ApprovalID: v.ApprovalID, Decision: "approve"}); err != nil {
			t.Fatal(err)
		}
		if v = p.wait(v.ToolCallID); v.Status != toolsvc.StatusSucceeded {
			t.Fatalf("approved: %+v", v)
		}
		// Deciding again changes nothing; the tool ran once.
		p.svc.Decide(p.ctx, toolsvc.DecideParams{ApprovalID: v.ApprovalID, Decision: "approve"})
		time.Sleep(100 * time.Millisecond)
		if n := srv.countCalls("echo"); n != 1 {
			t.Fatalf("approved call ran %d times", n)
		}

		// An override replaces the server's policy for one tool.
		if _, _, err := p.svc.PutTool(p.ctx, tool.Definition{Name: "web@media", Policy: tool.Policy{Decision: tool.DecisionRequireApproval}, Description: "Media, carefully."}); err != nil {
			t.Fatal(err)
		}
		info, err := p.svc.GetTool(p.ctx, "web@media")
		if err != nil || info.Policy.Decision != tool.DecisionRequireApproval || info.Description != "Media, carefully." || info.Override == nil {
			t.Fatalf("overridden: %+v %v", info, err)
		}
		v, err = p.invoke(r, "web@media", `{}`)
		if err != nil || v.State != store.ToolCallWaitingApproval {
			t.Fatalf("media: %+v %v", v, err)
		}
		if _, err := p.svc.Decide(p.ctx, toolsvc.DecideParams{ApprovalID: v.ApprovalID, Decision: "reject", Reason: "no"}); err != nil {
			t.Fatal(err)
		}
		if v = p.wait(v.ToolCallID); v.State != store.ToolCallRejected {
			t.Fatalf("rejected: %+v", v)
		}
		if n := srv.countCalls("media"); n != 0 {
			t.Fatalf("a rejected call ran %d times", n)
		}
		// Override of a server that is not registered: refused.
		if _, _, err := p.svc.PutTool(p.ctx, tool.Definition{Name: "other@x", Policy: tool.Policy{Decision: "block"}}); errCode(err) != "mcp_server_not_found" {
			t.Fatalf("override of an unknown server: %v", err)
		}
		if _, _, err := p.svc.PutTool(p.ctx, tool.Definition{Name: "web@media", Parameters: json.RawMessage(`{"type":"object"}`)}); errCode(err) != "invalid_tool" {
			t.Fatalf("override with parameters: %v", err)
		}
		// Deleting the override brings the server's policy back.
		if err := p.svc.DeleteTool(p.ctx, "web--media"); err != nil {
			t.Fatal(err)
		}
		if v, err = p.invoke(r, "web@media", `{}`); err != nil || v.Status != toolsvc.StatusSucceeded {
			t.Fatalf("after the override's delete: %+v %v", v, err)
		}
	})
}

// A hung MCP call ends TIMEOUT at its deadline and is cancelled on the
// server (notifications/cancelled); cancelling a call cancels its request
// too; the server's progress is recorded; a server that is down fails a
// call tool_unreachable at once.
func TestMCPToolDeadlinesAndFailures(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		srv := startHTTPServer(t)
		p := newPlatform(t, dialect)
		if _, _, err := p.mcp.Put(p.ctx, &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL(), OnFailure: tool.OnFailureReturnToAgent, TimeoutMS: 400}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p.mcp, "web", mcpclient.StatusConnected, 6)
		r := p.newRun("agent-a")

		v, err := p.invoke(r, "web@slow", `{}`)
		if err != nil {
			t.Fatal(err)
		}
		if v.Status == toolsvc.StatusPending {
			v = p.wait(v.ToolCallID)
		}
		if v.State != store.ToolCallTimeout {
			t.Fatalf("slow: %+v", v)
		}
		select {
		case <-srv.ev.slowCancelled:
		case <-time.After(30 * time.Second):
			t.Fatal("the timed-out request was not cancelled on the server")
		}
		waitFor(t, "notifications/cancelled", func() bool { return srv.posted(`"method":"notifications/cancelled"`) })

		// Cancelled by the caller while it runs: cancelled on the server too.
		if _, _, err := p.svc.PutTool(p.ctx, tool.Definition{Name: "web@slow", TimeoutMS: 60_000}); err != nil {
			t.Fatal(err)
		}
		errc := make(chan *toolsvc.CallView, 1)
		go func() { v, _ := p.invoke(r, "web@slow", `{}`); errc <- v }()
		<-srv.ev.slowStarted // the first call's
		<-srv.ev.slowStarted
		var pending *toolsvc.CallView
		waitFor(t, "the call to run", func() bool {
			calls, _ := p.st.ToolCallListActiveByRun(p.ctx, r.RunID)
			if len(calls) == 1 && calls[0].Status == store.ToolCallRunning {
				pending = toolsvc.View(calls[0])
				return true
			}
			return false
		})
		if v, err := p.svc.Cancel(p.ctx, toolsvc.Caller{AgentID: "agent-a"}, pending.ToolCallID, "changed my mind"); err != nil || v.State != store.ToolCallCancelled || v.Error.Message != "changed my mind" {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		select {
		case <-srv.ev.slowCancelled:
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled call's request was not cancelled on the server")
		}
		if v := <-errc; v.State != store.ToolCallCancelled {
			t.Fatalf("the invoke of the cancelled call answered %+v", v)
		}
		if v, err := p.svc.Cancel(p.ctx, toolsvc.Caller{AgentID: "agent-a"}, pending.ToolCallID, ""); err != nil || v.State != store.ToolCallCancelled {
			t.Fatalf("second cancel: %+v %v", v, err)
		}
		if st, _ := p.st.RunGet(p.ctx, r.RunID); st.Status != store.RunRunning {
			t.Fatalf("run after the cancel: %s", st.Status)
		}

		// Progress: recorded as tool_progress events while the call runs.
		v, err = p.invoke(r, "web@progress", `{"steps":3}`)
		if err != nil || v.Status != toolsvc.StatusSucceeded {
			t.Fatalf("progress: %+v %v", v, err)
		}
		type progressEvent struct {
			ToolCallID      string `json:"tool_call_id"`
			Progress, Total float64
			Message         string `json:"message"`
		}
		var progress []progressEvent
		for _, e := range p.events(r.RunID) {
			if e.Type == eventlog.TypeToolProgress {
				var pe progressEvent
				json.Unmarshal(e.Payload, &pe)
				pe.Progress, pe.Total = jsonNumber(e.Payload, "progress"), jsonNumber(e.Payload, "total")
				progress = append(progress, pe)
			}
		}
		if len(progress) == 0 || progress[0].Progress != 1 || progress[0].Total != 3 || progress[0].ToolCallID != v.ToolCallID || progress[0].Message != "step 1" {
			t.Fatalf("progress events %+v", progress)
		}

		// Down: fails at once, tool_unreachable; the tool did not run.
		srv.down()
		waitFor(t, "the session to drop", func() bool { s, _ := p.mcp.MCPServer("web"); return !s.Connected })
		began := time.Now()
		v, err = p.invoke(r, "web@echo", `{"text":"x"}`)
		if err != nil || v.State != store.ToolCallFailed || v.Error.Code != "tool_unreachable" {
			t.Fatalf("down: %+v %v", v, err)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}

		// A server never reached: its tools are not known, and a call of
		// one is refused as unreachable (503), not as an unknown tool.
		if _, _, err := p.mcp.Put(p.ctx, &mcpclient.Spec{Name: "dead", Transport: mcpclient.TransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp"}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p.mcp, "dead", mcpclient.StatusFailed, 0)
		_, err = p.invoke(r, "dead@anything", `{}`)
		var re *respond.Error
		if !errors.As(err, &re) || re.Code != "tool_unreachable" || re.Status != 503 || !strings.Contains(re.Message, "connection refused") {
			t.Fatalf("a never-connected server's tool: %v", err)
		}
	})
}

// Deleting a server while one of its calls runs ends the call at once,
// tool_unreachable (DESIGN §13: a server that drops fails its calls, never
// hangs), and the delete answers promptly: over Streamable HTTP and stdio.
func TestMCPServerDeletedDuringCall(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, transport := range []string{mcpclient.TransportStreamableHTTP, mcpclient.TransportStdio} {
		t.Run(transport, func(t *testing.T) {
			srv := startHTTPServer(t)
			p := newPlatform(t, "sqlite")
			spec := &mcpclient.Spec{Name: "web", Transport: transport, OnFailure: tool.OnFailureReturnToAgent, TimeoutMS: 60_000}
			if transport == mcpclient.TransportStdio {
				spec.Command, spec.Args, spec.Env = self, []string{"-test.run=^$"}, map[string]string{stdioServerEnv: "1"}
			} else {
				spec.URL = srv.URL()
			}
			if _, _, err := p.mcp.Put(p.ctx, spec); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, p.mcp, "web", mcpclient.StatusConnected, 6)
			r := p.newRun("agent-a")

			go p.invoke(r, "web@slow", `{}`)
			var running *store.ToolCall
			waitFor(t, "the call to run", func() bool {
				calls, _ := p.st.ToolCallListActiveByRun(p.ctx, r.RunID)
				if len(calls) == 1 && calls[0].Status == store.ToolCallRunning {
					running = calls[0]
					return true
				}
				return false
			})
			if transport == mcpclient.TransportStreamableHTTP {
				<-srv.ev.slowStarted
			} else {
				time.Sleep(200 * time.Millisecond) // the request is on its way
			}

			began := time.Now()
			if err := p.mcp.Delete(p.ctx, "web"); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(began); d > 2*time.Second {
				t.Errorf("the delete took %v with a call in flight", d)
			}
			v := p.wait(running.ToolCallID)
			if v.State != store.ToolCallFailed || v.Error == nil || v.Error.Code != "tool_unreachable" {
				t.Fatalf("the call of the deleted server: %+v %+v", v, v.Error)
			}
			if d := time.Since(began); d > 3*time.Second {
				t.Fatalf("the call of the deleted server ended %v after the delete", d)
			}
		})
	}
}

// A call that does not succeed is logged once, as a JSON line naming its
// tool call, run, session, tool and code (DESIGN §14): here a server that
// is down (tool_unreachable) and one that does not answer in time
// (timeout).
func TestMCPToolCallFailureLogged(t *testing.T) {
	srv := startHTTPServer(t)
	logs := &logBuffer{}
	p := newPlatformLogged(t, "sqlite", logs)
	if _, _, err := p.mcp.Put(p.ctx, &mcpclient.Spec{Name: "web", Transport: mcpclient.TransportStreamableHTTP, URL: srv.URL(), OnFailure: tool.OnFailureReturnToAgent, TimeoutMS: 300}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p.mcp, "web", mcpclient.StatusConnected, 6)
	r := p.newRun("agent-a")

	// failedLine is the one "tool call failed" line of a call.
	failedLine := func(callID string) map[string]any {
		t.Helper()
		var found []map[string]any
		for _, l := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "tool call failed" && m["tool_call_id"] == callID {
				found = append(found, m)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d lines logged for call %s, want 1:\n%s", len(found), callID, logs.String())
		}
		return found[0]
	}

	v, err := p.invoke(r, "web@slow", `{}`)
	if err == nil && v.Status == toolsvc.StatusPending {
		v = p.wait(v.ToolCallID)
	}
	if err != nil || v.State != store.ToolCallTimeout {
		t.Fatalf("slow: %+v %v", v, err)
	}
	waitFor(t, "the timeout's log line", func() bool { return strings.Contains(logs.String(), v.ToolCallID) })
	if m := failedLine(v.ToolCallID); m["level"] != "WARN" || m["code"] != "timeout" || m["state"] != "TIMEOUT" || m["run_id"] != r.RunID ||
		m["session_id"] != r.SessionID || m["tool_name"] != "web@slow" {
		t.Fatalf("the timed-out call's line: %v", m)
	}

	srv.down()
	waitFor(t, "the session to drop", func() bool { s, _ := p.mcp.MCPServer("web"); return !s.Connected })
	v, err = p.invoke(r, "web@echo", `{"text":"x"}`)
	if err != nil || v.Error == nil || v.Error.Code != "tool_unreachable" {
		t.Fatalf("down: %+v %v", v, err)
	}
	waitFor(t, "the failure's log line", func() bool { return strings.Contains(logs.String(), v.ToolCallID) })
	if m := failedLine(v.ToolCallID); m["level"] != "WARN" || m["code"] != "tool_unreachable" || m["state"] != "FAILED" || m["run_id"] != r.RunID ||
		m["session_id"] != r.SessionID || m["tool_name"] != "web@echo" || !strings.Contains(m["message"].(string), "web") {
		t.Fatalf("the unreachable call's line: %v", m)
	}
	// A call that succeeds is not logged as one.
	srv.up()
	waitStatus(t, p.mcp, "web", mcpclient.StatusConnected, 6)
	if v, err = p.invoke(r, "web@echo", `{"text":"ok"}`); err != nil || v.Status != toolsvc.StatusSucceeded {
		t.Fatalf("echo: %+v %v", v, err)
	}
	if strings.Contains(logs.String(), v.ToolCallID) {
		t.Fatalf("a successful call logged:\n%s", logs.String())
	}
}
