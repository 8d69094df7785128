package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tracing/otlprecv"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// headerLog records the traceparent of every request a handler gets.
type headerLog struct {
	mu  sync.Mutex
	tps []string
}

func (h *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.tps = append(h.tps, r.Header.Get("traceparent"))
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (h *headerLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.tps...)
}

// A run with an LLM call (through the proxy to the fake upstream) and a
// server tool call is one trace in an OTLP/HTTP receiver: the caller's
// traceparent parents the run's span, the agent continues the invoke
// span with a span of its own (exported by its own OpenTelemetry SDK to
// the same receiver) and sends that span's traceparent on its LLM and tool
// calls, so the platform's spans of those calls are its children; the
// upstream and the tool get the platform's spans' traceparents. The
// server's JSON log line about the run carries its ids and the trace id.
func TestTracingOneConnectedTrace(t *testing.T) {
	rc := &otlprecv.Receiver{}
	collector := httptest.NewServer(rc)
	t.Cleanup(collector.Close)

	var upstreamTPs, toolTPs headerLog
	up := httptest.NewServer(upstreamTPs.wrap(fakellm.New(fakellm.Options{})))
	t.Cleanup(up.Close)
	tool := httptest.NewServer(toolTPs.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"echo":"ok"}`)
	})))
	t.Cleanup(tool.Close)

	s := startServerEnv(t, testdb.DSN(t, "sqlite"), []string{
		"AGENTPLANE_LLM_BASE_URL=" + up.URL + "/v1",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=agentplane-e2e",
	}, "--log-format", "json", "--log-level", "debug")
	putTool(t, s, "trace.echo", map[string]any{"kind": "server", "description": "Echoes.", "endpoint": tool.URL,
		"parameters": map[string]any{"type": "object"}, "policy": map[string]any{"decision": "allow"}})

	// The agent's own OpenTelemetry, exporting to the same receiver.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(collector.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("test-agent"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test-agent")

	// A child agent the traced agent calls (direct form): its run's span
	// is a child of the agent's span, the request's traceparent.
	var child agentplane.AgentHandler
	childSrv := httptest.NewServer(&child)
	t.Cleanup(childSrv.Close)
	childKey := s.register("traced-child", childSrv.URL)
	child.Platform = agentplane.NewClient(s.URL, childKey)
	child.Handler = func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		return st.Delta("child says hi")
	}

	var h agentplane.AgentHandler
	agentSrv := httptest.NewServer(&h)
	t.Cleanup(agentSrv.Close)
	key := s.register("tracer", agentSrv.URL, "traced-child")
	h.Platform = agentplane.NewClient(s.URL, key)
	h.Handler = func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(req.Header))
		ctx, span := tracer.Start(ctx, "agent.handle")
		defer span.End()
		sc := span.SpanContext()
		c := req.Client().WithTraceparent(fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()))
		body, _ := json.Marshal(map[string]any{"model": "fake-gpt", "messages": []map[string]string{{"role": "user", "content": "ping"}}})
		hr, _ := http.NewRequestWithContext(ctx, "POST", c.OpenAIBaseURL()+"/chat/completions", bytes.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+c.APIKey)
		hr.Header.Set("Content-Type", "application/json")
		for k, v := range c.OpenAIHeaders() {
			hr.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("llm call: %d", resp.StatusCode)
		}
		// A call without a traceparent (an agent that does not pass it
		// on) still joins the run's trace, under the invoke span.
		hr, _ = http.NewRequestWithContext(ctx, "POST", c.OpenAIBaseURL()+"/chat/completions", bytes.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+c.APIKey)
		hr.Header.Set("Content-Type", "application/json")
		for k, v := range c.OpenAIHeaders() {
			if !strings.EqualFold(k, "traceparent") {
				hr.Header.Set(k, v)
			}
		}
		if resp, err = http.DefaultClient.Do(hr); err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("untraced llm call: %d", resp.StatusCode)
		}
		// A malformed traceparent counts as none.
		hr, _ = http.NewRequestWithContext(ctx, "POST", c.OpenAIBaseURL()+"/chat/completions", bytes.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+c.APIKey)
		hr.Header.Set("Content-Type", "application/json")
		for k, v := range c.OpenAIHeaders() {
			hr.Header.Set(k, v)
		}
		hr.Header.Set("traceparent", "garbage")
		if resp, err = http.DefaultClient.Do(hr); err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("llm call with a malformed traceparent: %d", resp.StatusCode)
		}
		if _, err := c.Tools().Invoke(ctx, "trace.echo", map[string]any{"x": 1}); err != nil {
			return err
		}
		// The tool form: the child's span is a child of the tool call's.
		if _, err := c.Tools().Invoke(ctx, "call_traced-child", map[string]any{"message": "by tool"}); err != nil {
			return err
		}
		stream, err := c.Agents().Invoke(ctx, "traced-child", "hello")
		if err != nil {
			return err
		}
		defer stream.Close()
		if _, err := stream.Text(); err != nil {
			return err
		}
		return st.Delta("traced")
	}

	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "tracer", "message": map[string]any{"role": "user", "content": "go"},
		"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"})
	msgs := c.untilEnd()
	if last := msgs[len(msgs)-1]; last["type"] != "done" || !strings.Contains(text(msgs), "traced") {
		t.Fatalf("run did not complete: %v", msgs)
	}
	started := msgs[0]
	runID, sid := sv(started, "run_id"), sv(started, "session_id")

	// Every expected span, by name, once all have arrived.
	want := []string{"agentplane.run", "agentplane.agent.invoke", "agent.handle", "child.run", "child.invoke", "toolchild.run", "agentplane.tool_call call_traced-child", "chat fake-gpt", "agentplane.tool_call trace.echo", "agentplane.tool.execute trace.echo"}
	byName := map[string]otlprecv.Span{}
	var childRuns, llms []otlprecv.Span
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		byName = map[string]otlprecv.Span{}
		childRuns, llms = nil, nil
		for _, sp := range rc.Spans() {
			name := sp.Name
			if sp.Attrs["agentplane.agent_id"] == "traced-child" {
				name = strings.Replace(strings.Replace(name, "agentplane.run", "child.run", 1), "agentplane.agent.invoke", "child.invoke", 1)
			}
			if name == "child.run" {
				childRuns = append(childRuns, sp)
				continue
			}
			if name == "chat fake-gpt" {
				llms = append(llms, sp)
			}
			byName[name] = sp
		}
		// The child runs: the direct form's is the agent span's child, the
		// tool form's the tool call's.
		toolCall := byName["agentplane.tool_call call_traced-child"]
		for _, sp := range childRuns {
			if toolCall.SpanID != "" && sp.ParentSpanID == toolCall.SpanID {
				byName["toolchild.run"] = sp
			} else {
				byName["child.run"] = sp
			}
		}
		missing := false
		for _, n := range want {
			if _, ok := byName[n]; !ok {
				missing = true
			}
		}
		if !missing && len(llms) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans received: %v", rc.Spans())
		}
	}
	for _, sp := range rc.Spans() {
		if sp.TraceID != callerTrace {
			t.Errorf("span %v is not in the caller's trace %s", sp, callerTrace)
		}
	}
	run, invoke, agentSpan := byName["agentplane.run"], byName["agentplane.agent.invoke"], byName["agent.handle"]
	call, exec := byName["agentplane.tool_call trace.echo"], byName["agentplane.tool.execute trace.echo"]
	// The traced call is the agent span's child; the other two (no
	// traceparent, a malformed one) the invoke's.
	var llm otlprecv.Span
	var untraced []otlprecv.Span
	for _, sp := range llms {
		if sp.ParentSpanID == agentSpan.SpanID {
			llm = sp
		} else {
			untraced = append(untraced, sp)
		}
	}
	if llm.SpanID == "" || len(untraced) != 2 || untraced[1].ParentSpanID != invoke.SpanID {
		t.Errorf("llm spans %v: want one under the agent's span %s, two under the invoke %s", llms, agentSpan.SpanID, invoke.SpanID)
	}
	for _, link := range []struct {
		child  otlprecv.Span
		parent string
	}{{run, callerSpan}, {invoke, run.SpanID}, {agentSpan, invoke.SpanID}, {llm, agentSpan.SpanID}, {untraced[0], invoke.SpanID}, {call, agentSpan.SpanID}, {exec, call.SpanID},
		{byName["child.run"], agentSpan.SpanID}, {byName["agentplane.tool_call call_traced-child"], agentSpan.SpanID},
		{byName["toolchild.run"], byName["agentplane.tool_call call_traced-child"].SpanID}} {
		if link.child.ParentSpanID != link.parent {
			t.Errorf("%v: parent %s, want %s", link.child, link.child.ParentSpanID, link.parent)
		}
	}
	if run.Service != "agentplane-e2e" || agentSpan.Service != "test-agent" {
		t.Errorf("services: run %q, agent %q", run.Service, agentSpan.Service)
	}
	if run.Attrs["agentplane.run_id"] != runID || run.Attrs["agentplane.session_id"] != sid || run.Attrs["agentplane.outcome"] != "done" || run.Error {
		t.Errorf("run span attributes %v", run.Attrs)
	}
	if llm.Attrs["gen_ai.request.model"] != "fake-gpt" || llm.Attrs["agentplane.run_id"] != runID || llm.Attrs["gen_ai.usage.input_tokens"] == "" ||
		llm.Attrs["gen_ai.usage.input_tokens"] == "0" || llm.Attrs["agentplane.outcome"] != "ok" {
		t.Errorf("llm span attributes %v", llm.Attrs)
	}
	if call.Attrs["agentplane.tool_call_id"] == "" || call.Attrs["agentplane.outcome"] != "succeeded" || exec.Attrs["agentplane.tool_call_id"] != call.Attrs["agentplane.tool_call_id"] {
		t.Errorf("tool spans: call %v, execute %v", call.Attrs, exec.Attrs)
	}
	// What went over the wire: the upstream got the LLM span as its
	// parent, the tool the execution span, and run_started recorded the
	// run span's traceparent.
	if got := upstreamTPs.all(); len(got) != 3 || got[0] != "00-"+callerTrace+"-"+llm.SpanID+"-01" {
		t.Errorf("upstream traceparents %v, want the llm span %s first", got, llm.SpanID)
	}
	if got := toolTPs.all(); len(got) != 1 || got[0] != "00-"+callerTrace+"-"+exec.SpanID+"-01" {
		t.Errorf("tool traceparents %v, want the execution span %s", got, exec.SpanID)
	}
	if tp := sv(started, "traceparent"); tp != "00-"+callerTrace+"-"+run.SpanID+"-01" {
		t.Errorf("run_started traceparent %q, want the run span %s (%v)", tp, run.SpanID, started)
	}

	// The JSON log line about the run's end carries its ids.
	var line map[string]any
	for deadline := time.Now().Add(5 * time.Second); line == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, l := range strings.Split(s.output(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "run done" && m["run_id"] == runID {
				line = m
			}
		}
	}
	if line == nil || line["session_id"] != sid || line["trace_id"] != callerTrace || line["span_id"] != run.SpanID || line["level"] != "DEBUG" {
		t.Fatalf("log line %v in:\n%s", line, s.output())
	}
}

// A run is one trace even where nobody hands the platform a span: a tool
// call from an agent that sends no traceparent goes under the run's agent
// invoke (as its LLM calls do), and so does the execution of a call that
// a person approved later (the decision's request has no span of the
// run's), and a call_<agent>'s child run.
func TestTracingToolCallsWithoutTraceparentJoinTheRun(t *testing.T) {
	rc := &otlprecv.Receiver{}
	collector := httptest.NewServer(rc)
	t.Cleanup(collector.Close)
	var toolTPs headerLog
	tool := httptest.NewServer(toolTPs.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"echo":"ok"}`)
	})))
	t.Cleanup(tool.Close)
	s := startServerEnv(t, testdb.DSN(t, "sqlite"), []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100",
	})
	putTool(t, s, "plain.echo", map[string]any{"kind": "server", "description": "Echoes.", "endpoint": tool.URL,
		"parameters": map[string]any{"type": "object"}, "policy": map[string]any{"decision": "allow"}})
	putTool(t, s, "guarded.echo", map[string]any{"kind": "server", "description": "Echoes, once approved.", "endpoint": tool.URL,
		"parameters": map[string]any{"type": "object"}, "policy": alwaysApproval})

	var child agentplane.AgentHandler
	childSrv := httptest.NewServer(&child)
	t.Cleanup(childSrv.Close)
	child.Platform = agentplane.NewClient(s.URL, s.register("quiet-child", childSrv.URL))
	child.Handler = func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error { return st.Delta("hi") }

	var h agentplane.AgentHandler
	agentSrv := httptest.NewServer(&h)
	t.Cleanup(agentSrv.Close)
	h.Platform = agentplane.NewClient(s.URL, s.register("untraced", agentSrv.URL, "quiet-child"))
	h.Handler = func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		c := req.Client().WithTraceparent("") // an agent that does not pass it on
		for _, name := range []string{"plain.echo", "guarded.echo"} {
			if _, err := c.Tools().Invoke(ctx, name, map[string]any{"x": 1}); err != nil {
				return err
			}
		}
		if _, err := c.Tools().Invoke(ctx, "call_quiet-child", map[string]any{"message": "by tool"}); err != nil {
			return err
		}
		return st.Delta("done")
	}

	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "untraced", "message": map[string]any{"role": "user", "content": "go"}})
	msgs := c.readUntilAll("approval_required", isType("approval_required"))
	ap := msgs[len(msgs)-1]
	if code, body := s.call("POST", "/v1/approvals/"+sv(ap, "approval_id")+":decide", adminKey, map[string]any{"decision": "approve"}); code != http.StatusOK {
		t.Fatalf("decide: %d %v", code, body)
	}
	if end := c.untilEnd(); end[len(end)-1]["type"] != "done" {
		t.Fatalf("run ended %v", end[len(end)-1])
	}

	want := []string{"agentplane.run untraced", "agentplane.agent.invoke", "agentplane.tool_call plain.echo", "agentplane.tool_call guarded.echo",
		"agentplane.tool.execute plain.echo", "agentplane.tool.execute guarded.echo", "agentplane.tool_call call_quiet-child", "agentplane.run quiet-child"}
	var byName map[string]otlprecv.Span
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		byName = map[string]otlprecv.Span{}
		for _, sp := range rc.Spans() {
			name := sp.Name
			if name == "agentplane.run" {
				name += " " + sp.Attrs["agentplane.agent_id"]
			}
			if name == "agentplane.agent.invoke" && sp.Attrs["agentplane.agent_id"] != "untraced" {
				continue
			}
			byName[name] = sp
		}
		missing := ""
		for _, n := range want {
			if _, ok := byName[n]; !ok {
				missing = n
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q among %v", missing, rc.Spans())
		}
	}
	run, invoke := byName["agentplane.run untraced"], byName["agentplane.agent.invoke"]
	for _, n := range want {
		if sp := byName[n]; sp.TraceID != run.TraceID {
			t.Errorf("%s is in trace %s, not the run's %s", n, sp.TraceID, run.TraceID)
		}
	}
	for _, link := range []struct{ child, parent string }{
		{"agentplane.tool_call plain.echo", invoke.SpanID},
		{"agentplane.tool_call guarded.echo", invoke.SpanID},
		{"agentplane.tool.execute plain.echo", byName["agentplane.tool_call plain.echo"].SpanID},
		// Approved later: under the run's invoke, in the run's trace.
		{"agentplane.tool.execute guarded.echo", invoke.SpanID},
		{"agentplane.tool_call call_quiet-child", invoke.SpanID},
		{"agentplane.run quiet-child", byName["agentplane.tool_call call_quiet-child"].SpanID},
	} {
		if got := byName[link.child].ParentSpanID; got != link.parent {
			t.Errorf("%s: parent %s, want %s", link.child, got, link.parent)
		}
	}
	for _, tp := range toolTPs.all() {
		if !strings.Contains(tp, "-"+run.TraceID+"-") {
			t.Errorf("the tool got traceparent %s, outside the run's trace %s", tp, run.TraceID)
		}
	}
}

// A failure's span carries its code (API.md: "a failure sets the span's
// status to error with the error code"), the run's span the end that was
// recorded even where another step ended the run (here its tool call's
// failure, with on_failure fail_run), and the "tool call failed" log line
// the run's trace_id.
func TestTracingFailuresCarryTheirCode(t *testing.T) {
	rc := &otlprecv.Receiver{}
	collector := httptest.NewServer(rc)
	t.Cleanup(collector.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	s := startServerEnv(t, testdb.DSN(t, "sqlite"), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100"})
	putTool(t, s, "broken.echo", map[string]any{"kind": "server", "description": "Fails.", "endpoint": broken.URL,
		"parameters": map[string]any{"type": "object"}, "policy": map[string]any{"decision": "allow"}, "on_failure": "fail_run"})

	var h agentplane.AgentHandler
	agentSrv := httptest.NewServer(&h)
	t.Cleanup(agentSrv.Close)
	h.Platform = agentplane.NewClient(s.URL, s.register("failing", agentSrv.URL))
	h.Handler = func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		req.Client().Tools().Invoke(ctx, "broken.echo", map[string]any{})
		<-ctx.Done() // the platform ends the run
		return ctx.Err()
	}
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "failing", "message": map[string]any{"role": "user", "content": "go"}})
	msgs := c.untilEnd()
	runID := sv(msgs[0], "run_id")
	if run := waitRunEnded(t, s, runID); run["status"] != "FAILED" || sv(obj(run, "error"), "code") != "tool_http_error" {
		t.Fatalf("run %v", run)
	}

	var run, invoke, exec otlprecv.Span
	for deadline := time.Now().Add(20 * time.Second); run.SpanID == "" || invoke.SpanID == "" || exec.SpanID == ""; time.Sleep(50 * time.Millisecond) {
		for _, sp := range rc.Spans() {
			switch sp.Name {
			case "agentplane.run":
				run = sp
			case "agentplane.agent.invoke":
				invoke = sp
			case "agentplane.tool.execute broken.echo":
				exec = sp
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans: %v", rc.Spans())
		}
	}
	if !run.Error || run.StatusMessage != "tool_http_error" || run.Attrs["agentplane.outcome"] != "failed" {
		t.Errorf("run span: error %v %q, outcome %q; want tool_http_error, failed", run.Error, run.StatusMessage, run.Attrs["agentplane.outcome"])
	}
	if !exec.Error || exec.StatusMessage != "tool_http_error" {
		t.Errorf("tool execution span: error %v %q, want the code tool_http_error", exec.Error, exec.StatusMessage)
	}
	if invoke.Error {
		t.Errorf("agent invoke span failed with %q: the platform closed the request, the agent did not fail", invoke.StatusMessage)
	}

	var line map[string]any
	for deadline := time.Now().Add(5 * time.Second); line == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, l := range strings.Split(s.output(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "tool call failed" && m["run_id"] == runID {
				line = m
			}
		}
	}
	if line == nil || line["trace_id"] != run.TraceID || line["code"] != "tool_http_error" {
		t.Fatalf("tool call failed line %v, want trace_id %s, in:\n%s", line, run.TraceID, s.output())
	}
}
