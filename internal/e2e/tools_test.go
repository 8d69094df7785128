package e2e

// End-to-end tests of tool calls (issue 4): the real binary on SQLite and
// PostgreSQL, real agents calling tools through the SDKs (the Python agent
// of testdata/tool_agent.py and an in-process Go SDK agent), a real server
// tool that counts its executions, and real WebSocket clients answering
// client tools and approvals. Every test ends by checking, in the database,
// that no run, tool call or approval was left in flight.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	apserver "github.com/agentplane/agentplane/internal/server"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// ---------------------------------------------------------------------------
// Fixtures

// toolEndpoint is a server tool. At its root it answers {tool_call_id,
// run_id, args, n}, n counting its executions; /500 answers HTTP 500,
// /notjson a body that is not JSON, and /slow waits until the platform
// gives up on it (or unblockSlow). It records every request it got.
type toolEndpoint struct {
	*httptest.Server
	mu          sync.Mutex
	hits        []toolHit
	slowStarted chan string // tool_call_id of each /slow request, as it arrives
	slowRelease chan struct{}
	done        chan struct{}
	releaseOnce sync.Once
}

type toolHit struct {
	path           string
	idempotencyKey string
	body           map[string]any
}

func newToolEndpoint(t *testing.T) *toolEndpoint {
	t.Helper()
	te := &toolEndpoint{slowStarted: make(chan string, 16), slowRelease: make(chan struct{}), done: make(chan struct{})}
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":"body is not JSON"}`, http.StatusBadRequest)
			return
		}
		te.mu.Lock()
		te.hits = append(te.hits, toolHit{path: r.URL.Path, idempotencyKey: r.Header.Get("Idempotency-Key"), body: body})
		n := len(te.hits)
		te.mu.Unlock()
		switch r.URL.Path {
		case "/500":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":"boom"}`)
			return
		case "/notjson":
			io.WriteString(w, "this is not JSON")
			return
		case "/slow":
			select {
			case te.slowStarted <- sv(body, "tool_call_id"):
			default:
			}
			select {
			case <-te.slowRelease:
			case <-r.Context().Done():
				return
			case <-te.done:
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"tool_call_id": body["tool_call_id"], "run_id": body["run_id"], "args": body["args"], "n": n})
	}))
	t.Cleanup(func() {
		close(te.done)
		te.CloseClientConnections()
		te.Close()
	})
	return te
}

// unblockSlow lets /slow requests answer.
func (te *toolEndpoint) unblockSlow() { te.releaseOnce.Do(func() { close(te.slowRelease) }) }

// waitSlow waits until a /slow request arrived and returns its call id.
func (te *toolEndpoint) waitSlow(t *testing.T) string {
	t.Helper()
	select {
	case id := <-te.slowStarted:
		return id
	case <-time.After(60 * time.Second):
		t.Fatalf("the slow tool was never called")
		return ""
	}
}

// count is how many times the tool ran.
func (te *toolEndpoint) count() int {
	te.mu.Lock()
	defer te.mu.Unlock()
	return len(te.hits)
}

func (te *toolEndpoint) hit(t *testing.T, i int) toolHit {
	t.Helper()
	te.mu.Lock()
	defer te.mu.Unlock()
	if i >= len(te.hits) {
		t.Fatalf("the tool ran %d times; wanted execution #%d", len(te.hits), i+1)
	}
	return te.hits[i]
}

// toolProbe lets a test hold the Python agent back (GET /gate/{name}
// answers 200 once the test opens the gate) and hear what its tool calls
// returned (POST /report), even when the platform has closed its stream.
type toolProbe struct {
	*httptest.Server
	mu      sync.Mutex
	gates   map[string]chan struct{}
	reports chan map[string]any
	done    chan struct{}
}

func newToolProbe(t *testing.T) *toolProbe {
	t.Helper()
	p := &toolProbe{gates: map[string]chan struct{}{}, reports: make(chan map[string]any, 64), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /gate/{name}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-p.gate(r.PathValue("name")):
			w.WriteHeader(http.StatusOK)
		case <-time.After(20 * time.Second):
			http.Error(w, "still closed", http.StatusServiceUnavailable)
		case <-p.done:
			http.Error(w, "closing", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if json.NewDecoder(r.Body).Decode(&m) == nil {
			select {
			case p.reports <- m:
			default:
			}
		}
	})
	p.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(p.done)
		p.CloseClientConnections()
		p.Close()
	})
	return p
}

func (p *toolProbe) gate(name string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.gates[name]
	if ch == nil {
		ch = make(chan struct{})
		p.gates[name] = ch
	}
	return ch
}

func (p *toolProbe) open(name string) {
	ch := p.gate(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (p *toolProbe) gateURL(name string) string { return p.URL + "/gate/" + name }
func (p *toolProbe) reportURL() string          { return p.URL + "/report" }

// nextReport waits for the agent's report of one tool call.
func (p *toolProbe) nextReport(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-p.reports:
		return m
	case <-time.After(90 * time.Second):
		t.Fatalf("the agent reported no tool call outcome")
		return nil
	}
}

// startPyToolAgent starts testdata/tool_agent.py (the Python SDK from this
// checkout on PYTHONPATH), which registers itself with s as agentID.
func startPyToolAgent(t *testing.T, s *server, agentID string) {
	t.Helper()
	cmd := exec.Command("env", "PYTHONPATH="+filepath.Join(repoRoot, "sdk", "python"),
		"python3", "-u", filepath.Join(repoRoot, "internal", "e2e", "testdata", "tool_agent.py"), "--agent-id", agentID)
	startAgentProcess(t, s, cmd, agentID)
}

// toolSpec is the user's message both test agents understand.
type toolSpec struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	Key  string         `json:"key"`
	// Hold (Go agent only): report the run id on holding and wait for release.
	Hold bool `json:"hold"`
}

// goToolAgent is an agent written with the Go SDK, served in-process. It
// calls the tool of its message with client.Tools().Invoke and streams the
// result (or error:<code>) like the Python agent.
type goToolAgent struct {
	srv     *httptest.Server
	key     string
	holding chan string // run ids of handlers waiting for release
	release chan struct{}
	once    sync.Once
}

func startGoToolAgent(t *testing.T, s *server, agentID string) *goToolAgent {
	t.Helper()
	ga := &goToolAgent{holding: make(chan string, 16), release: make(chan struct{})}
	var h atomic.Pointer[agentplane.AgentHandler]
	ga.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := h.Load(); a != nil {
			a.ServeHTTP(w, r)
			return
		}
		w.WriteHeader(http.StatusOK) // a health probe before the key is known
	}))
	t.Cleanup(func() {
		ga.releaseAll()
		ga.srv.CloseClientConnections()
		ga.srv.Close()
	})
	ga.key = s.register(agentID, ga.srv.URL)
	h.Store(&agentplane.AgentHandler{Handler: ga.handle, Platform: agentplane.NewClient(s.URL, ga.key)})
	return ga
}

func (ga *goToolAgent) releaseAll() { ga.once.Do(func() { close(ga.release) }) }

// held waits for a handler to reach its hold and returns its run id.
func (ga *goToolAgent) held(t *testing.T) string {
	t.Helper()
	select {
	case id := <-ga.holding:
		return id
	case <-time.After(60 * time.Second):
		t.Fatalf("the Go agent was never invoked")
		return ""
	}
}

func (ga *goToolAgent) handle(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
	var spec toolSpec
	if err := json.Unmarshal([]byte(req.InputMessage.Content), &spec); err != nil {
		return st.Delta("bad message: " + err.Error() + "\n")
	}
	if err := st.State("calling_tool", map[string]any{"tool": spec.Tool}); err != nil {
		return err
	}
	if spec.Hold {
		select {
		case ga.holding <- req.RunID:
		default:
		}
		select {
		case <-ga.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if spec.Tool == "" {
		return st.Delta("released\n")
	}
	var opts []agentplane.ToolOption
	if spec.Key != "" {
		opts = append(opts, agentplane.WithIdempotencyKey(spec.Key))
	}
	res, err := req.Client().Tools().Invoke(ctx, spec.Tool, spec.Args, opts...)
	var te *agentplane.ToolError
	var ae *agentplane.APIError
	switch {
	case errors.As(err, &te):
		return st.Delta("error:" + te.Code + "\n")
	case errors.As(err, &ae):
		return st.Delta("api_error:" + ae.Code + "\n")
	case err != nil:
		return err
	}
	return st.Delta(string(res) + "\n")
}

// ---------------------------------------------------------------------------
// Helpers

// putTool registers a tool (admin) and fails the test unless it is stored.
func putTool(t *testing.T, s *server, name string, def map[string]any) map[string]any {
	t.Helper()
	code, body := s.call("PUT", "/v1/tools/"+name, adminKey, def)
	if code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("PUT tool %s: %d %v", name, code, body)
	}
	return body
}

var amountSchema = map[string]any{
	"type":       "object",
	"required":   []any{"amount"},
	"properties": map[string]any{"amount": map[string]any{"type": "number"}, "to": map[string]any{"type": "string"}},
}

// bigNeedsApproval is the policy of issue 4's example: args.amount > 100 →
// require_approval, anything else allowed.
var bigNeedsApproval = map[string]any{"decision": "allow", "rules": []any{
	map[string]any{"name": "big", "when": "args.amount > 100", "decision": "require_approval"},
}}

var alwaysApproval = map[string]any{"decision": "require_approval"}

// transferTool is a server tool on endpoint taking {amount, to}.
func transferTool(endpoint, onFailure string, policy map[string]any) map[string]any {
	return map[string]any{"kind": "server", "description": "Moves money.", "endpoint": endpoint,
		"parameters": amountSchema, "policy": policy, "on_failure": onFailure}
}

// invokeSpec starts a run of agentID whose message is spec as JSON, in
// sessionID ("" = a new session), and returns run_started.
func (c *client) invokeSpec(agentID, sessionID string, spec map[string]any) map[string]any {
	c.t.Helper()
	content, _ := json.Marshal(spec)
	m := map[string]any{"type": "agent_invoke", "request_id": "invoke", "agent_id": agentID, "message": map[string]any{"role": "user", "content": string(content)}}
	if sessionID != "" {
		m["session_id"] = sessionID
	}
	c.send(m)
	for {
		msg := c.next()
		switch {
		case msg["type"] == "run_started":
			return msg
		case msg["type"] == "error" && msg["seq"] == nil:
			c.t.Fatalf("agent_invoke refused: %v", msg)
		}
	}
}

// readUntilAll reads until every predicate has matched some message and
// returns everything read.
func (c *client) readUntilAll(what string, preds ...func(map[string]any) bool) []map[string]any {
	c.t.Helper()
	var got []map[string]any
	matched := make([]bool, len(preds))
	for left := len(preds); left > 0; {
		m, err := c.read(60 * time.Second)
		if err != nil {
			c.t.Fatalf("waiting for %s: %v; read so far: %v", what, err, got)
		}
		got = append(got, m)
		if isEnd(m) {
			c.t.Fatalf("the run ended while waiting for %s: %v", what, got)
		}
		for i, p := range preds {
			if !matched[i] && p(m) {
				matched[i] = true
				left--
			}
		}
	}
	return got
}

// nextReply reads the next message, which must be a reply (no seq).
func (c *client) nextReply() map[string]any {
	c.t.Helper()
	m := c.next()
	if m["seq"] != nil {
		c.t.Fatalf("expected a reply, got the logged message %v", m)
	}
	return m
}

func isType(typ string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["type"] == typ }
}

func isState(state string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["type"] == "state" && m["state"] == state }
}

// find returns the first message p matches, or fails.
func find(t *testing.T, msgs []map[string]any, what string, p func(map[string]any) bool) map[string]any {
	t.Helper()
	for _, m := range msgs {
		if p(m) {
			return m
		}
	}
	t.Fatalf("no %s among %v", what, msgs)
	return nil
}

func sv(m map[string]any, k string) string { s, _ := m[k].(string); return s }

func obj(m map[string]any, k string) map[string]any { o, _ := m[k].(map[string]any); return o }

func num(m map[string]any, k string) float64 { f, _ := m[k].(float64); return f }

// deltaLines is the agent's reply split into its lines (one per tool call).
func deltaLines(msgs []map[string]any) []string {
	var out []string
	for _, l := range strings.Split(text(msgs), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// singleLine checks the run ended done with one line of reply and returns it.
func singleLine(t *testing.T, msgs []map[string]any) string {
	t.Helper()
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("run ended with %v, want done; messages: %v", end, msgs)
	}
	lines := deltaLines(msgs)
	if len(lines) != 1 {
		t.Fatalf("agent replied %q, want one line", lines)
	}
	return lines[0]
}

// singleResult is singleLine decoded as the tool's JSON result.
func singleResult(t *testing.T, msgs []map[string]any) map[string]any {
	t.Helper()
	line := singleLine(t, msgs)
	var res map[string]any
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("agent replied %q, want a JSON result", line)
	}
	return res
}

// payload is an event's payload object.
func payload(e map[string]any) map[string]any { return obj(e, "payload") }

// waitRunEnded polls the run (admin) until it is terminal and returns it.
func waitRunEnded(t *testing.T, s *server, runID string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
		if code != http.StatusOK {
			t.Fatalf("GET run %s: %d %v", runID, code, run)
		}
		switch run["status"] {
		case "DONE", "FAILED", "CANCELLED":
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %v", runID, run["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runStatus(t *testing.T, s *server, runID string) string {
	t.Helper()
	code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("GET run %s: %d %v", runID, code, run)
	}
	return sv(run, "status")
}

// toolCall reads a tool call as the admin.
func toolCall(t *testing.T, s *server, id string) map[string]any {
	t.Helper()
	code, v := s.call("GET", "/v1/tool_calls/"+id, adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("GET tool call %s: %d %v", id, code, v)
	}
	return v
}

// approvalByID finds an approval in GET /v1/approvals?status=status.
func approvalByID(t *testing.T, s *server, status, id string) map[string]any {
	t.Helper()
	code, body := s.call("GET", "/v1/approvals?status="+status, adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("GET approvals: %d %v", code, body)
	}
	list, _ := body["approvals"].([]any)
	for _, a := range list {
		if m, _ := a.(map[string]any); sv(m, "approval_id") == id {
			return m
		}
	}
	return nil
}

func decide(s *server, approvalID, decision string) (int, map[string]any) {
	s.t.Helper()
	return s.call("POST", "/v1/approvals/"+approvalID+":decide", adminKey, map[string]any{"decision": decision, "reason": "test"})
}

// httpJSON is an HTTP call that is safe from any goroutine (no t.Fatal).
func httpJSON(method, url, key string, body any, hdr ...string) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("non-JSON body %q", raw)
		}
	}
	return resp.StatusCode, out, nil
}

// metricValue reads an unlabelled metric from /metrics.
func metricValue(t *testing.T, s *server, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, line)
			}
			return v
		}
	}
	t.Fatalf("no metric %s in:\n%s", name, raw)
	return 0
}

// waitMetric polls a metric until ok accepts it.
func waitMetric(t *testing.T, s *server, name string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v := metricValue(t, s, name)
		if ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %s stuck at %v", name, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertSettled checks, in the database, that nothing is left in flight:
// no run that is not DONE, FAILED or CANCELLED, no unfinished tool call, no
// pending approval. Runs end a moment after their last message, so it waits
// a little before it complains.
func assertSettled(t *testing.T, dsn string) {
	t.Helper()
	ctx := ctxTimeout(t, 120*time.Second)
	st, err := apserver.OpenStore(ctx, dsn)
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	defer st.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		runs, err := st.RunListActive(ctx, &store.RunListActiveParams{Limit: 1000})
		if err != nil {
			t.Fatalf("list active runs: %v", err)
		}
		calls, err := st.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: math.MaxInt64, Limit: 1000})
		if err != nil {
			t.Fatalf("list unfinished tool calls: %v", err)
		}
		aps, err := st.ApprovalList(ctx, &store.ApprovalListParams{Status: store.ApprovalPending, Limit: 1000})
		if err != nil {
			t.Fatalf("list pending approvals: %v", err)
		}
		if len(runs)+len(calls)+len(aps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, r := range runs {
				fmt.Fprintf(&b, "\n  run %s (agent %s) is %s", r.RunID, r.AgentID, r.Status)
			}
			for _, c := range calls {
				fmt.Fprintf(&b, "\n  tool call %s (%s) is %s", c.ToolCallID, c.ToolName, c.Status)
			}
			for _, a := range aps {
				fmt.Fprintf(&b, "\n  approval %s (%s) is %s", a.ApprovalID, a.ToolName, a.Status)
			}
			t.Errorf("left in flight at the end of the test:%s", b.String())
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertExecutions checks how many times the server tool ran.
func assertExecutions(t *testing.T, te *toolEndpoint, want int) {
	t.Helper()
	if n := te.count(); n != want {
		t.Fatalf("the server tool ran %d times, want %d", n, want)
	}
}

// ---------------------------------------------------------------------------
// 1. A server tool the policy allows.

func TestToolServerCallAllowed(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "srv.echo", map[string]any{"kind": "server", "description": "Echoes its args.", "endpoint": te.URL,
			"parameters": map[string]any{"type": "object", "required": []any{"x"}, "properties": map[string]any{"x": map[string]any{"type": "integer"}}},
			"policy":     map[string]any{"decision": "allow"}})
		startPyToolAgent(t, s, "py-tools")
		startGoToolAgent(t, s, "go-tools")
		c := dial(t, s, "alice", "alice-key")

		for i, agentID := range []string{"py-tools", "go-tools"} {
			x := 7 + i
			started := c.invokeSpec(agentID, "", map[string]any{"tool": "srv.echo", "args": map[string]any{"x": x}})
			runID, sessionID := sv(started, "run_id"), sv(started, "session_id")
			res := singleResult(t, c.untilEnd())
			callID := sv(res, "tool_call_id")
			if callID == "" || sv(res, "run_id") != runID || num(obj(res, "args"), "x") != float64(x) {
				t.Fatalf("%s: result %v of run %s, want the tool's echo of x=%d", agentID, res, runID, x)
			}

			var order []string
			for _, e := range s.events("/v1/sessions/" + sessionID + "/events") {
				p := payload(e)
				if sv(p, "tool_call_id") != callID {
					continue
				}
				order = append(order, sv(e, "type"))
				switch e["type"] {
				case "policy_decision":
					if p["decision"] != "allow" {
						t.Errorf("policy_decision %v", p)
					}
				case "tool_result":
					if p["status"] != "succeeded" || p["state"] != "SUCCEEDED" {
						t.Errorf("tool_result %v", p)
					}
				}
			}
			if want := []string{"tool_call_created", "policy_decision", "tool_dispatched", "tool_result"}; !slices.Equal(order, want) {
				t.Fatalf("%s: events of the call %v, want %v", agentID, order, want)
			}

			hit := te.hit(t, i)
			if hit.idempotencyKey != callID || sv(hit.body, "tool_call_id") != callID || sv(hit.body, "run_id") != runID || sv(hit.body, "tool_name") != "srv.echo" {
				t.Fatalf("%s: the tool got Idempotency-Key %q and body %v; want the call %s of run %s", agentID, hit.idempotencyKey, hit.body, callID, runID)
			}
			if v := toolCall(t, s, callID); v["status"] != "succeeded" || v["state"] != "SUCCEEDED" || num(obj(v, "result"), "n") != float64(i+1) {
				t.Fatalf("%s: tool call %v", agentID, v)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("%s: run %v", agentID, run)
			}
		}
		assertExecutions(t, te, 2)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 2. Approvals decided by the user's client over the WebSocket.

func TestToolApprovalOverWebSocket(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "pay.transfer", transferTool(te.URL, "return_to_agent", bigNeedsApproval))
		putTool(t, s, "pay.strict", transferTool(te.URL, "fail_run", alwaysApproval))
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		// waitApproval starts a run calling tool and reads until its
		// approval is asked for and the run is paused.
		waitApproval := func(tool string, amount int) (runID string, ap map[string]any) {
			t.Helper()
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": tool, "args": map[string]any{"amount": amount, "to": "bob"}})
			runID = sv(started, "run_id")
			msgs := c.readUntilAll("approval_required and PAUSED_WAITING_APPROVAL", isType("approval_required"), isState("PAUSED_WAITING_APPROVAL"))
			ap = find(t, msgs, "approval_required", isType("approval_required"))
			if sv(ap, "approval_id") == "" || sv(ap, "tool_call_id") == "" || sv(ap, "tool_name") != tool || sv(ap, "args_summary") == "" ||
				sv(ap, "run_id") != runID || ap["seq"] == nil || num(ap, "expires_at") == 0 {
				t.Fatalf("approval_required %v", ap)
			}
			paused := find(t, msgs, "paused state", isState("PAUSED_WAITING_APPROVAL"))
			if d := obj(paused, "detail"); sv(d, "tool_call_id") != sv(ap, "tool_call_id") || sv(d, "approval_id") != sv(ap, "approval_id") {
				t.Fatalf("paused state %v for approval %v", paused, ap)
			}
			if st := runStatus(t, s, runID); st != "PAUSED_WAITING_APPROVAL" {
				t.Fatalf("run is %s while its approval is pending", st)
			}
			return runID, ap
		}

		t.Run("rule not matched runs at once", func(t *testing.T) {
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.transfer", "args": map[string]any{"amount": 50}})
			msgs := c.untilEnd()
			for _, m := range msgs {
				if m["type"] == "approval_required" {
					t.Fatalf("amount 50 asked for approval: %v", m)
				}
			}
			if res := singleResult(t, msgs); num(obj(res, "args"), "amount") != 50 {
				t.Fatalf("result %v", res)
			}
			waitRunEnded(t, s, sv(started, "run_id"))
			assertExecutions(t, te, 1)
		})

		t.Run("approve", func(t *testing.T) {
			runID, ap := waitApproval("pay.transfer", 250)
			assertExecutions(t, te, 1) // not yet
			c.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve", "reason": "fine"})
			msgs := c.untilEnd()
			running := find(t, msgs, "RUNNING state", isState("RUNNING"))
			if d := obj(running, "detail"); sv(d, "tool_call_id") != sv(ap, "tool_call_id") || sv(d, "outcome") != "DISPATCHED" {
				t.Fatalf("RUNNING state after the approval: %v", running)
			}
			res := singleResult(t, msgs)
			if sv(res, "tool_call_id") != sv(ap, "tool_call_id") || num(obj(res, "args"), "amount") != 250 {
				t.Fatalf("result %v for approval %v", res, ap)
			}
			assertExecutions(t, te, 2)

			// A conflicting second decision is refused and changes nothing.
			c.send(map[string]any{"type": "approval_decision", "request_id": "d2", "run_id": runID, "approval_id": ap["approval_id"], "decision": "reject", "reason": "changed my mind"})
			// Over WebSocket as over HTTP, the conflict carries the recorded
			// approval (DESIGN §2.2).
			if m := c.nextReply(); m["type"] != "error" || m["request_id"] != "d2" || sv(m, "code") != "approval_conflict" ||
				sv(obj(m, "approval"), "approval_id") != sv(ap, "approval_id") || sv(obj(m, "approval"), "status") != "APPROVED" {
				t.Fatalf("second decision answered %v", m)
			}
			a := approvalByID(t, s, "APPROVED", sv(ap, "approval_id"))
			if a == nil || a["decided_by"] != "alice" || a["reason"] != "fine" {
				t.Fatalf("approval after a conflicting decision: %v", a)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("run %v", run)
			}
			assertExecutions(t, te, 2)
		})

		t.Run("reject returns to the agent", func(t *testing.T) {
			runID, ap := waitApproval("pay.transfer", 500)
			c.send(map[string]any{"type": "approval_decision", "request_id": "d3", "run_id": runID, "approval_id": ap["approval_id"], "decision": "reject", "reason": "too much"})
			msgs := c.untilEnd()
			if line := singleLine(t, msgs); line != "error:rejected" {
				t.Fatalf("agent saw %q, want error:rejected", line)
			}
			running := find(t, msgs, "RUNNING state", isState("RUNNING"))
			if d := obj(running, "detail"); sv(d, "outcome") != "REJECTED" {
				t.Fatalf("RUNNING state after the rejection: %v", running)
			}
			if v := toolCall(t, s, sv(ap, "tool_call_id")); v["state"] != "REJECTED" || sv(obj(v, "error"), "code") != "rejected" {
				t.Fatalf("tool call %v", v)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("run %v", run)
			}
			assertExecutions(t, te, 2)
		})

		t.Run("reject fails the run", func(t *testing.T) {
			runID, ap := waitApproval("pay.strict", 5)
			c.send(map[string]any{"type": "approval_decision", "request_id": "d4", "run_id": runID, "approval_id": ap["approval_id"], "decision": "reject", "reason": "no"})
			msgs := c.untilEnd()
			end := msgs[len(msgs)-1]
			if end["type"] != "error" || end["code"] != "rejected" || end["tool_call_id"] != ap["tool_call_id"] || end["run_id"] != runID {
				t.Fatalf("run ended with %v, want error rejected for %v", end, ap["tool_call_id"])
			}
			run := waitRunEnded(t, s, runID)
			if e := obj(run, "error"); run["status"] != "FAILED" || e["code"] != "rejected" || e["tool_call_id"] != ap["tool_call_id"] {
				t.Fatalf("run %v", run)
			}
			assertExecutions(t, te, 2)
		})

		t.Run("other users and a reconnected client", func(t *testing.T) {
			c1 := dial(t, s, "alice", "alice-key")
			started := c1.invokeSpec("py-tools", "", map[string]any{"tool": "pay.transfer", "args": map[string]any{"amount": 700}})
			runID := sv(started, "run_id")
			msgs := c1.readUntilAll("approval_required", isType("approval_required"))
			ap := msgs[len(msgs)-1]
			c1.conn.Close()

			// Bob cannot decide on Alice's approval.
			bob := dial(t, s, "bob", "bob-key")
			bob.send(map[string]any{"type": "approval_decision", "request_id": "b1", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve"})
			if m := bob.nextReply(); m["type"] != "error" || m["request_id"] != "b1" || sv(m, "code") == "" {
				t.Fatalf("bob's decision answered %v", m)
			}
			if approvalByID(t, s, "PENDING", sv(ap, "approval_id")) == nil {
				t.Fatalf("bob's decision changed the approval")
			}

			// Alice comes back: the pending approval is sent again, without seq.
			c2 := dial(t, s, "alice", "alice-key")
			c2.send(map[string]any{"type": "subscribe", "request_id": "s1", "session_id": ap["session_id"], "after_seq": ap["seq"]})
			msgs = c2.readUntilAll("the approval_required again", func(m map[string]any) bool { return m["type"] == "approval_required" && m["seq"] == nil })
			again := msgs[len(msgs)-1]
			if again["approval_id"] != ap["approval_id"] || again["tool_call_id"] != ap["tool_call_id"] || again["run_id"] != runID || sv(again, "args_summary") == "" {
				t.Fatalf("resent approval_required %v, first sent %v", again, ap)
			}
			c2.send(map[string]any{"type": "approval_decision", "request_id": "a1", "run_id": runID, "approval_id": again["approval_id"], "decision": "approve"})
			if res := singleResult(t, c2.untilEnd()); num(obj(res, "args"), "amount") != 700 {
				t.Fatalf("result %v", res)
			}
			waitRunEnded(t, s, runID)
			assertExecutions(t, te, 3)
		})
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 3. Approvals decided over HTTP.

func TestToolApprovalOverHTTP(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "pay.transfer", transferTool(te.URL, "return_to_agent", bigNeedsApproval))
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.transfer", "args": map[string]any{"amount": 300, "to": "carol"}})
		runID := sv(started, "run_id")
		ap := c.readUntilAll("approval_required", isType("approval_required"))
		apID := sv(ap[len(ap)-1], "approval_id")

		pending := approvalByID(t, s, "PENDING", apID)
		if pending == nil || pending["status"] != "PENDING" || pending["run_id"] != runID || pending["tool_name"] != "pay.transfer" || sv(pending, "args_summary") == "" {
			t.Fatalf("GET /v1/approvals?status=PENDING: %v", pending)
		}
		// A user key reads the approvals of its own sessions only (issue 11).
		if code, body := s.call("GET", "/v1/approvals?status=PENDING", "alice-key", nil); code != http.StatusOK || len(body["approvals"].([]any)) != 1 {
			t.Fatalf("alice listing her approvals: %d %v", code, body)
		}
		if code, body := s.call("GET", "/v1/approvals?status=PENDING", "bob-key", nil); code != http.StatusOK || len(body["approvals"].([]any)) != 0 {
			t.Fatalf("bob listing approvals sees alice's: %d %v", code, body)
		}
		if code, body := s.call("POST", "/v1/approvals/"+apID+":decide", "alice-key", map[string]any{"decision": "approve"}); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("a user key decided over HTTP: %d %v", code, body)
		}
		if code, body := decide(s, "ap_does_not_exist", "approve"); code != http.StatusNotFound {
			t.Fatalf("deciding an unknown approval: %d %v", code, body)
		}
		if code, body := s.call("POST", "/v1/approvals/"+apID+":decide", adminKey, map[string]any{"decision": "maybe"}); code != http.StatusBadRequest {
			t.Fatalf("decision maybe: %d %v", code, body)
		}

		code, first := s.call("POST", "/v1/approvals/"+apID+":decide", adminKey, map[string]any{"decision": "approve", "reason": "looks fine", "decided_by": "ops-carla"})
		if code != http.StatusOK || first["status"] != "APPROVED" || first["decided_by"] != "ops-carla" || num(first, "decided_at") == 0 || first["reason"] != "looks fine" {
			t.Fatalf("approve: %d %v", code, first)
		}
		code, again := s.call("POST", "/v1/approvals/"+apID+":decide", adminKey, map[string]any{"decision": "approve", "reason": "again", "decided_by": "ops-dan"})
		if code != http.StatusOK || again["status"] != "APPROVED" || again["decided_by"] != "ops-carla" || again["decided_at"] != first["decided_at"] || again["reason"] != "looks fine" {
			t.Fatalf("the same decision again: %d %v, want the recorded %v", code, again, first)
		}
		code, conflict := decide(s, apID, "reject")
		if code != http.StatusConflict || sv(obj(conflict, "error"), "code") == "" {
			t.Fatalf("reject after approve: %d %v", code, conflict)
		}
		if a := obj(obj(conflict, "error"), "approval"); a != nil && a["status"] != "APPROVED" {
			t.Fatalf("the 409 reports the approval as %v", a)
		}
		if approvalByID(t, s, "PENDING", apID) != nil {
			t.Fatalf("the approval is still listed as pending")
		}

		msgs := c.untilEnd()
		if res := singleResult(t, msgs); num(obj(res, "args"), "amount") != 300 {
			t.Fatalf("result %v", res)
		}
		if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
			t.Fatalf("run %v", run)
		}
		assertExecutions(t, te, 1)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 4. Racing decisions (and the expiry) on one approval.

type decideOutcome struct {
	decision string
	code     int
	body     map[string]any
	err      error
}

// decideConcurrently sends the decisions at once, each no earlier than at.
func decideConcurrently(s *server, approvalID string, decisions []string, at time.Time) []decideOutcome {
	out := make([]decideOutcome, len(decisions))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, d := range decisions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if wait := time.Until(at); wait > 0 {
				time.Sleep(wait)
			}
			code, body, err := httpJSON("POST", s.URL+"/v1/approvals/"+approvalID+":decide", adminKey,
				map[string]any{"decision": d, "reason": fmt.Sprintf("racer %d", i), "decided_by": fmt.Sprintf("racer-%d", i)})
			out[i] = decideOutcome{decision: d, code: code, body: body, err: err}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func TestToolApprovalDecisionRace(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "pay.race", transferTool(te.URL, "return_to_agent", alwaysApproval))
		expiring := transferTool(te.URL, "return_to_agent", alwaysApproval)
		expiring["approval_timeout_ms"] = 1500
		putTool(t, s, "pay.race.expiring", expiring)
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		decisions := make([]string, 50)
		for i := range decisions {
			decisions[i] = "approve"
			if i%2 == 1 {
				decisions[i] = "reject"
			}
		}
		ran := 0
		outcomes := map[string]int{}
		for round, tool := range []string{"pay.race", "pay.race", "pay.race", "pay.race.expiring"} {
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": tool, "args": map[string]any{"amount": round + 1}})
			runID := sv(started, "run_id")
			msgs := c.readUntilAll("approval_required", isType("approval_required"))
			ap := msgs[len(msgs)-1]
			apID := sv(ap, "approval_id")
			at := time.Now()
			if tool == "pay.race.expiring" {
				// Aim at the deadline, so the sweeper's expiry races too.
				at = time.UnixMilli(int64(num(ap, "expires_at")))
			}
			results := decideConcurrently(s, apID, decisions, at)

			end := c.untilEnd()
			v := toolCall(t, s, sv(ap, "tool_call_id"))
			var winner string // the approval's final status
			for _, status := range []string{"APPROVED", "REJECTED", "EXPIRED"} {
				if approvalByID(t, s, status, apID) != nil {
					winner = status
				}
			}
			outcomes[winner]++
			wantCall := map[string]string{"APPROVED": "SUCCEEDED", "REJECTED": "REJECTED", "EXPIRED": "EXPIRED"}[winner]
			if winner == "" || v["state"] != wantCall {
				t.Fatalf("round %d: approval %q, tool call %v", round, winner, v)
			}
			var decidedAt any
			for i, r := range results {
				if r.err != nil {
					t.Fatalf("round %d: racer %d: %v", round, i, r.err)
				}
				won := (winner == "APPROVED" && r.decision == "approve") || (winner == "REJECTED" && r.decision == "reject")
				switch {
				case won:
					if r.code != http.StatusOK || r.body["status"] != winner {
						t.Fatalf("round %d: racer %d (%s) got %d %v; the approval is %s", round, i, r.decision, r.code, r.body, winner)
					}
					if decidedAt == nil {
						decidedAt = r.body["decided_at"]
					} else if r.body["decided_at"] != decidedAt {
						t.Fatalf("round %d: two different decisions recorded: %v and decided_at %v", round, r.body, decidedAt)
					}
				default:
					e := obj(r.body, "error")
					if r.code != http.StatusConflict || sv(e, "code") == "" {
						t.Fatalf("round %d: racer %d (%s) got %d %v; the approval is %s", round, i, r.decision, r.code, r.body, winner)
					}
					if a := obj(e, "approval"); a != nil && a["status"] != winner {
						t.Fatalf("round %d: racer %d's 409 reports %v; the approval is %s", round, i, a["status"], winner)
					}
				}
			}
			line := singleLine(t, end)
			switch winner {
			case "APPROVED":
				ran++
				var res map[string]any
				if json.Unmarshal([]byte(line), &res) != nil || sv(res, "tool_call_id") != sv(ap, "tool_call_id") || num(res, "n") != float64(ran) {
					t.Fatalf("round %d: agent saw %q after the approval", round, line)
				}
			case "REJECTED":
				if line != "error:rejected" {
					t.Fatalf("round %d: agent saw %q after the rejection", round, line)
				}
			case "EXPIRED":
				if line != "error:expired" {
					t.Fatalf("round %d: agent saw %q after the expiry", round, line)
				}
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("round %d: run %v", round, run)
			}
			assertExecutions(t, te, ran)
		}
		t.Logf("winners: %v", outcomes)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 5. One idempotency key, many invokes.

func TestToolIdempotentInvokes(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "srv.echo", map[string]any{"kind": "server", "description": "Echoes its args.", "endpoint": te.URL,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}},
			"policy":     map[string]any{"decision": "allow"}})
		ga := startGoToolAgent(t, s, "go-tools")
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		// The Go agent holds its run open while 100 invokes race with one
		// key; once released it invokes with that key itself, through the SDK.
		started := c.invokeSpec("go-tools", "", map[string]any{"hold": true, "tool": "srv.echo", "args": map[string]any{"x": 1}, "key": "k-100"})
		runID := ga.held(t)
		if runID != sv(started, "run_id") {
			t.Fatalf("held run %s, started %v", runID, started)
		}
		type answer struct {
			code int
			body map[string]any
			err  error
		}
		answers := make([]answer, 100)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				code, body, err := httpJSON("POST", s.URL+"/v1/tools/srv.echo:invoke", ga.key,
					map[string]any{"run_id": runID, "args": map[string]any{"x": 1}, "idempotency_key": "k-100"}, "x-run-id", runID)
				answers[i] = answer{code, body, err}
			}()
		}
		close(start)
		wg.Wait()
		callID := ""
		for i, a := range answers {
			if a.err != nil || a.code != http.StatusOK || a.body["status"] != "succeeded" {
				t.Fatalf("invoke %d: %d %v %v", i, a.code, a.body, a.err)
			}
			if callID == "" {
				callID = sv(a.body, "tool_call_id")
			}
			if id := sv(a.body, "tool_call_id"); id != callID || num(obj(a.body, "result"), "n") != 1 {
				t.Fatalf("invoke %d answered call %s (%v); another answered %s", i, id, a.body, callID)
			}
		}
		assertExecutions(t, te, 1)

		code, body := s.call("POST", "/v1/tools/srv.echo:invoke", ga.key, map[string]any{"run_id": runID, "args": map[string]any{"x": 2}, "idempotency_key": "k-100"}, "x-run-id", runID)
		if code != http.StatusConflict || errCode(body) != "idempotency_conflict" {
			t.Fatalf("same key, other args: %d %v", code, body)
		}
		// Same args written differently are the same args.
		code, body = s.call("POST", "/v1/tools/srv.echo:invoke", ga.key, `{"run_id":"`+runID+`","args":{ "x" : 1 },"idempotency_key":"k-100"}`, "x-run-id", runID)
		if code != http.StatusOK || sv(body, "tool_call_id") != callID {
			t.Fatalf("same key, same args re-spaced: %d %v", code, body)
		}

		// An agent reads its own calls only.
		if code, v := s.call("GET", "/v1/tool_calls/"+callID, ga.key, nil); code != http.StatusOK || v["tool_call_id"] != callID || v["status"] != "succeeded" {
			t.Fatalf("GET own tool call: %d %v", code, v)
		}
		other := startGoToolAgent(t, s, "go-other")
		if code, v := s.call("GET", "/v1/tool_calls/"+callID, other.key, nil); code != http.StatusNotFound {
			t.Fatalf("another agent read the call: %d %v", code, v)
		}
		if code, v := s.call("POST", "/v1/tool_calls/"+callID+":wait?timeout_ms=10", other.key, nil); code != http.StatusNotFound {
			t.Fatalf("another agent waited on the call: %d %v", code, v)
		}

		ga.releaseAll()
		res := singleResult(t, c.untilEnd())
		if sv(res, "tool_call_id") != callID || num(res, "n") != 1 {
			t.Fatalf("the Go SDK's invoke with the key returned %v, want call %s", res, callID)
		}
		if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
			t.Fatalf("run %v", run)
		}
		assertExecutions(t, te, 1)

		// The Python SDK repeating one key in one run: one call, one execution.
		c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.echo", "args": map[string]any{"x": 3}, "key": "py-k", "repeat": 3})
		msgs := c.untilEnd()
		lines := deltaLines(msgs)
		if len(lines) != 3 || lines[0] != lines[1] || lines[1] != lines[2] || !strings.Contains(lines[0], `"n": 2`) {
			t.Fatalf("three invokes with one key answered %q", lines)
		}
		assertExecutions(t, te, 2)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 6. Client tools run by the user's WebSocket client.

func TestClientToolOverWebSocket(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		putTool(t, s, "ui.confirm", map[string]any{"kind": "client", "description": "Asks the user.", "on_failure": "return_to_agent",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}})
		putTool(t, s, "ui.slow", map[string]any{"kind": "client", "description": "Never answered.", "on_failure": "return_to_agent", "timeout_ms": 1000})
		putTool(t, s, "ui.guarded", map[string]any{"kind": "client", "description": "Asks the user, once approved.", "on_failure": "return_to_agent", "policy": alwaysApproval})
		startPyToolAgent(t, s, "py-tools")
		probe := newToolProbe(t)

		// waitRequest starts a run calling ui.confirm on c and reads until the
		// client is asked to run it.
		waitRequest := func(c *client, tool, q string) (runID string, tr map[string]any) {
			t.Helper()
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": tool, "args": map[string]any{"q": q}})
			runID = sv(started, "run_id")
			msgs := c.readUntilAll("tool_request and PAUSED_WAITING_TOOL", isType("tool_request"), isState("PAUSED_WAITING_TOOL"))
			tr = find(t, msgs, "tool_request", isType("tool_request"))
			if sv(tr, "tool_call_id") == "" || sv(tr, "tool_name") != tool || sv(obj(tr, "args"), "q") != q || num(tr, "deadline_ts") == 0 ||
				sv(tr, "run_id") != runID || tr["seq"] == nil {
				t.Fatalf("tool_request %v", tr)
			}
			return runID, tr
		}

		t.Run("answered", func(t *testing.T) {
			c := dial(t, s, "alice", "alice-key")
			runID, tr := waitRequest(c, "ui.confirm", "sure?")
			if st := runStatus(t, s, runID); st != "PAUSED_WAITING_TOOL" {
				t.Fatalf("run is %s while the client runs the tool", st)
			}
			// Bob cannot answer Alice's call.
			bob := dial(t, s, "bob", "bob-key")
			bob.send(map[string]any{"type": "tool_result", "request_id": "b1", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": map[string]any{"answer": "bob says yes"}})
			if m := bob.nextReply(); m["type"] != "error" || m["request_id"] != "b1" || sv(m, "code") == "" {
				t.Fatalf("bob's tool_result answered %v", m)
			}
			c.send(map[string]any{"type": "tool_result", "request_id": "a1", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": map[string]any{"answer": "yes"}})
			msgs := c.untilEnd()
			running := find(t, msgs, "RUNNING state", isState("RUNNING"))
			if d := obj(running, "detail"); sv(d, "tool_call_id") != sv(tr, "tool_call_id") || sv(d, "outcome") != "SUCCEEDED" {
				t.Fatalf("RUNNING state %v", running)
			}
			if res := singleResult(t, msgs); res["answer"] != "yes" {
				t.Fatalf("agent got %v, want the client's answer", res)
			}
			// A duplicate answer is refused.
			c.send(map[string]any{"type": "tool_result", "request_id": "a2", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": map[string]any{"answer": "no"}})
			if m := c.nextReply(); m["type"] != "error" || m["request_id"] != "a2" || sv(m, "code") != "tool_call_not_waiting" ||
				m["state"] != "SUCCEEDED" || m["tool_call_id"] != tr["tool_call_id"] {
				t.Fatalf("duplicate tool_result answered %v, want tool_call_not_waiting with the call's state", m)
			}
			if v := toolCall(t, s, sv(tr, "tool_call_id")); v["state"] != "SUCCEEDED" || obj(v, "result")["answer"] != "yes" {
				t.Fatalf("tool call after a duplicate answer: %v", v)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("run %v", run)
			}

			// The client may refuse: the agent gets tool_error.
			runID, tr = waitRequest(c, "ui.confirm", "delete everything?")
			c.send(map[string]any{"type": "tool_result", "request_id": "a3", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": false, "error": map[string]any{"code": "denied", "message": "the user said no"}})
			if line := singleLine(t, c.untilEnd()); line != "error:tool_error" {
				t.Fatalf("agent saw %q after the client's ok:false", line)
			}
			waitRunEnded(t, s, runID)
			c.conn.Close()
			bob.conn.Close()
		})

		t.Run("approval then the client", func(t *testing.T) {
			c := dial(t, s, "alice", "alice-key")
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": "ui.guarded", "args": map[string]any{"q": "guarded?"}})
			runID := sv(started, "run_id")
			msgs := c.readUntilAll("approval_required", isType("approval_required"), isState("PAUSED_WAITING_APPROVAL"))
			ap := find(t, msgs, "approval_required", isType("approval_required"))
			c.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve"})
			msgs = c.readUntilAll("tool_request", isType("tool_request"), isState("PAUSED_WAITING_TOOL"))
			tr := find(t, msgs, "tool_request", isType("tool_request"))
			if tr["tool_call_id"] != ap["tool_call_id"] {
				t.Fatalf("tool_request %v after approval %v", tr, ap)
			}
			if st := runStatus(t, s, runID); st != "PAUSED_WAITING_TOOL" {
				t.Fatalf("run is %s while the approved client tool runs", st)
			}
			c.send(map[string]any{"type": "tool_result", "request_id": "a1", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": map[string]any{"answer": "approved and done"}})
			msgs = c.untilEnd()
			find(t, msgs, "RUNNING state", isState("RUNNING"))
			if res := singleResult(t, msgs); res["answer"] != "approved and done" {
				t.Fatalf("agent got %v", res)
			}
			waitRunEnded(t, s, runID)
		})

		t.Run("client offline", func(t *testing.T) {
			// Every other connection is gone, so none can take the call.
			noConns := func(v float64) bool { return v == 0 }
			waitMetric(t, s, "agentplane_ws_connections", noConns)
			c := dial(t, s, "alice", "alice-key")
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "anyone?"},
				"gate": probe.gateURL("offline"), "report": probe.reportURL()})
			runID := sv(started, "run_id")
			c.conn.Close()
			waitMetric(t, s, "agentplane_ws_connections", noConns)
			probe.open("offline") // the agent calls the tool only now
			rep := probe.nextReport(t)
			if rep["ok"] != false || rep["code"] != "client_offline" {
				t.Fatalf("agent's call with no client connected: %v", rep)
			}
			if v := toolCall(t, s, sv(rep, "tool_call_id")); v["state"] != "FAILED" || sv(obj(v, "error"), "code") != "client_offline" {
				t.Fatalf("tool call %v", v)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("run %v", run)
			}
		})

		t.Run("client timeout", func(t *testing.T) {
			c := dial(t, s, "alice", "alice-key")
			runID, tr := waitRequest(c, "ui.slow", "hello?")
			msgs := c.untilEnd() // nobody answers
			if line := singleLine(t, msgs); line != "error:timeout" {
				t.Fatalf("agent saw %q, want error:timeout", line)
			}
			running := find(t, msgs, "RUNNING state", isState("RUNNING"))
			if d := obj(running, "detail"); sv(d, "outcome") != "TIMEOUT" || sv(d, "tool_call_id") != sv(tr, "tool_call_id") {
				t.Fatalf("RUNNING state %v", running)
			}
			c.send(map[string]any{"type": "tool_result", "request_id": "late", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": "too late"})
			if m := c.nextReply(); m["type"] != "error" || m["request_id"] != "late" || sv(m, "code") == "" {
				t.Fatalf("late tool_result answered %v", m)
			}
			if v := toolCall(t, s, sv(tr, "tool_call_id")); v["state"] != "TIMEOUT" || sv(obj(v, "error"), "code") != "timeout" {
				t.Fatalf("tool call %v", v)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("run %v", run)
			}
			c.conn.Close()
		})

		t.Run("reconnect and subscribe", func(t *testing.T) {
			c := dial(t, s, "alice", "alice-key")
			runID, tr := waitRequest(c, "ui.confirm", "still there?")
			c.conn.Close()

			c2 := dial(t, s, "alice", "alice-key")
			c2.send(map[string]any{"type": "subscribe", "request_id": "s1", "session_id": tr["session_id"], "after_seq": tr["seq"]})
			msgs := c2.readUntilAll("the tool_request again", func(m map[string]any) bool {
				return m["type"] == "tool_request" && m["seq"] == nil
			})
			again := msgs[len(msgs)-1]
			if again["tool_call_id"] != tr["tool_call_id"] || again["tool_name"] != "ui.confirm" || sv(obj(again, "args"), "q") != "still there?" || again["run_id"] != runID {
				t.Fatalf("resent tool_request %v, first sent %v", again, tr)
			}
			c2.send(map[string]any{"type": "tool_result", "request_id": "r1", "run_id": runID, "tool_call_id": again["tool_call_id"], "ok": true, "result": map[string]any{"answer": "back"}})
			if res := singleResult(t, c2.untilEnd()); res["answer"] != "back" {
				t.Fatalf("agent got %v after the reconnect", res)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
				t.Fatalf("run %v", run)
			}
		})
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 7. The block policy.

func TestToolPolicyBlock(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "srv.blocked", transferTool(te.URL, "return_to_agent", map[string]any{"decision": "block"}))
		putTool(t, s, "srv.blocked.strict", transferTool(te.URL, "fail_run", map[string]any{"decision": "block"}))
		putTool(t, s, "pay.sanctions", transferTool(te.URL, "return_to_agent", map[string]any{"decision": "allow", "rules": []any{
			map[string]any{"name": "sanctioned", "when": `args.to == "mallory"`, "decision": "block"},
		}}))
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.blocked", "args": map[string]any{"amount": 1}})
		if line := singleLine(t, c.untilEnd()); line != "error:blocked" {
			t.Fatalf("agent saw %q, want error:blocked", line)
		}
		waitRunEnded(t, s, sv(started, "run_id"))

		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.sanctions", "args": map[string]any{"amount": 1, "to": "mallory"}})
		if line := singleLine(t, c.untilEnd()); line != "error:blocked" {
			t.Fatalf("agent saw %q for mallory, want error:blocked", line)
		}
		var rule string
		for _, e := range s.events("/v1/sessions/" + sv(started, "session_id") + "/events") {
			if e["type"] == "policy_decision" {
				rule = sv(payload(e), "rule")
				if payload(e)["decision"] != "block" {
					t.Fatalf("policy_decision %v", payload(e))
				}
			}
		}
		if !strings.Contains(rule, "sanctioned") {
			t.Fatalf("policy_decision names rule %q, want the matching one", rule)
		}
		waitRunEnded(t, s, sv(started, "run_id"))

		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.sanctions", "args": map[string]any{"amount": 1, "to": "bob"}})
		if res := singleResult(t, c.untilEnd()); sv(obj(res, "args"), "to") != "bob" {
			t.Fatalf("transfer to bob: %v", res)
		}
		waitRunEnded(t, s, sv(started, "run_id"))
		assertExecutions(t, te, 1)

		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.blocked.strict", "args": map[string]any{"amount": 1}})
		runID := sv(started, "run_id")
		msgs := c.untilEnd()
		end := msgs[len(msgs)-1]
		if end["type"] != "error" || end["code"] != "blocked" || sv(end, "tool_call_id") == "" {
			t.Fatalf("run ended with %v, want error blocked", end)
		}
		run := waitRunEnded(t, s, runID)
		if e := obj(run, "error"); run["status"] != "FAILED" || e["code"] != "blocked" || e["tool_call_id"] != end["tool_call_id"] {
			t.Fatalf("run %v", run)
		}
		if v := toolCall(t, s, sv(end, "tool_call_id")); v["state"] != "BLOCKED" {
			t.Fatalf("tool call %v", v)
		}
		assertExecutions(t, te, 1)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 8. Cancelling a run cancels what it waits for.

func TestToolCancelRunCascades(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "pay.transfer", transferTool(te.URL, "return_to_agent", alwaysApproval))
		putTool(t, s, "srv.slow", transferTool(te.URL+"/slow", "return_to_agent", map[string]any{"decision": "allow"}))
		putTool(t, s, "ui.confirm", map[string]any{"kind": "client", "description": "Asks the user.", "on_failure": "return_to_agent"})
		startPyToolAgent(t, s, "py-tools")
		probe := newToolProbe(t)
		c := dial(t, s, "alice", "alice-key")

		// cancel cancels the run and checks the agent's call returned
		// wantCode (cancelled, or outcome_unknown for a server tool that
		// was running): its wait (or inline invoke) was woken by the cascade.
		cancel := func(runID, callID, wantCode string) {
			t.Helper()
			c.send(map[string]any{"type": "cancel_run", "request_id": "x1", "run_id": runID})
			if end := c.untilEnd(); !isState("CANCELLED")(end[len(end)-1]) {
				t.Fatalf("cancel ended with %v", end[len(end)-1])
			}
			if rep := probe.nextReport(t); rep["ok"] != false || rep["code"] != wantCode || rep["tool_call_id"] != callID {
				t.Fatalf("the agent's call ended with %v, want %s %s", rep, wantCode, callID)
			}
			wantState := "CANCELLED"
			if wantCode == "outcome_unknown" {
				wantState = "FAILED"
			}
			if v := toolCall(t, s, callID); v["state"] != wantState || sv(obj(v, "error"), "code") != wantCode {
				t.Fatalf("tool call %v", v)
			}
			if run := waitRunEnded(t, s, runID); run["status"] != "CANCELLED" {
				t.Fatalf("run %v", run)
			}
		}

		t.Run("waiting for approval", func(t *testing.T) {
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.transfer", "args": map[string]any{"amount": 1}, "report": probe.reportURL()})
			runID := sv(started, "run_id")
			msgs := c.readUntilAll("approval_required", isType("approval_required"))
			ap := msgs[len(msgs)-1]
			apID := sv(ap, "approval_id")
			cancel(runID, sv(ap, "tool_call_id"), "cancelled")
			if a := approvalByID(t, s, "CANCELLED", apID); a == nil {
				t.Fatalf("approval %s is not CANCELLED", apID)
			}
			if code, body := decide(s, apID, "approve"); code != http.StatusConflict {
				t.Fatalf("approving a cancelled approval: %d %v", code, body)
			}
			c.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": runID, "approval_id": apID, "decision": "approve"})
			if m := c.nextReply(); m["type"] != "error" || m["request_id"] != "d1" {
				t.Fatalf("approval_decision after the cancel answered %v", m)
			}
			assertExecutions(t, te, 0)
		})

		t.Run("waiting for the client", func(t *testing.T) {
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "?"}, "report": probe.reportURL()})
			runID := sv(started, "run_id")
			msgs := c.readUntilAll("tool_request", isType("tool_request"))
			tr := msgs[len(msgs)-1]
			cancel(runID, sv(tr, "tool_call_id"), "cancelled")
			c.send(map[string]any{"type": "tool_result", "request_id": "r1", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": "late"})
			if m := c.nextReply(); m["type"] != "error" || m["request_id"] != "r1" {
				t.Fatalf("tool_result after the cancel answered %v", m)
			}
		})

		t.Run("server tool running", func(t *testing.T) {
			started := c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.slow", "args": map[string]any{"amount": 1}, "report": probe.reportURL()})
			runID := sv(started, "run_id")
			callID := te.waitSlow(t)
			if v := toolCall(t, s, callID); v["state"] != "RUNNING" {
				t.Fatalf("tool call while its tool runs: %v", v)
			}
			// The POST reached the tool, which may act on it whatever the
			// cancel: the call is recorded outcome_unknown, not cancelled.
			cancel(runID, callID, "outcome_unknown")
			if v := toolCall(t, s, callID); !strings.Contains(sv(obj(v, "error"), "message"), "may have run") {
				t.Fatalf("outcome_unknown without saying so: %v", v)
			}
			// The tool answers after all: the answer is dropped.
			te.unblockSlow()
			assertSettled(t, dsn)
			if v := toolCall(t, s, callID); v["state"] != "FAILED" {
				t.Fatalf("the tool's late answer changed the ended call: %v", v)
			}
			assertExecutions(t, te, 1)
		})
		assertSettled(t, dsn)
	})
}

// An agent whose first act is a slow server tool call is silent meanwhile,
// past the first event's deadline and the idle one: it waits on the
// platform, as it would for an approval, and the run is not cut with
// agent_timeout (its tool call has a deadline of its own).
func TestSilentWhileItsToolRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--agent-first-byte-timeout", "1s", "--agent-idle-timeout", "1s")
		te := newToolEndpoint(t)
		putTool(t, s, "srv.slow", transferTool(te.URL+"/slow", "return_to_agent", map[string]any{"decision": "allow"}))
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")
		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.slow", "args": map[string]any{"amount": 1}, "quiet": true})
		callID := te.waitSlow(t)
		time.Sleep(3 * time.Second) // three times either deadline
		te.unblockSlow()
		if run := waitRunEnded(t, s, sv(started, "run_id")); run["status"] != "DONE" {
			t.Fatalf("run %v", run)
		}
		if v := toolCall(t, s, callID); v["state"] != "SUCCEEDED" {
			t.Fatalf("tool call %v", v)
		}
	})
}

// ---------------------------------------------------------------------------
// 9. A crash while runs wait: the restart fails them and cancels their waits.

func TestToolRestartCascade(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--shutdown-grace", "1s")
		te := newToolEndpoint(t)
		putTool(t, s, "pay.transfer", transferTool(te.URL, "return_to_agent", alwaysApproval))
		putTool(t, s, "ui.confirm", map[string]any{"kind": "client", "description": "Asks the user.", "on_failure": "return_to_agent"})
		putTool(t, s, "srv.slow", transferTool(te.URL+"/slow", "return_to_agent", map[string]any{"decision": "allow"}))
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.transfer", "args": map[string]any{"amount": 9}})
		approvalRun := sv(started, "run_id")
		msgs := c.readUntilAll("approval_required", isType("approval_required"))
		ap := msgs[len(msgs)-1]

		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "?"}})
		clientRun := sv(started, "run_id")
		msgs = c.readUntilAll("tool_request", isType("tool_request"))
		tr := msgs[len(msgs)-1]

		// A third run's server tool is running when the process dies.
		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.slow", "args": map[string]any{"amount": 3}})
		slowRun := sv(started, "run_id")
		slowCall := te.waitSlow(t)

		s.kill()
		s.restart()

		for _, runID := range []string{approvalRun, clientRun, slowRun} {
			run := waitRunEnded(t, s, runID)
			if run["status"] != "FAILED" || obj(run, "error")["code"] != "platform_restarted" {
				t.Fatalf("run %s after the restart: %v", runID, run)
			}
		}
		for _, id := range []string{sv(ap, "tool_call_id"), sv(tr, "tool_call_id")} {
			if v := toolCall(t, s, id); v["state"] != "CANCELLED" || v["status"] != "failed" {
				t.Fatalf("tool call after the restart: %v", v)
			}
		}
		// The server tool was running when the process died: it may have
		// done its work, so the call is not recorded as cancelled.
		if v := toolCall(t, s, slowCall); v["state"] != "FAILED" || v["status"] != "failed" || sv(obj(v, "error"), "code") != "outcome_unknown" ||
			!strings.Contains(sv(obj(v, "error"), "message"), "platform_restarted") || !strings.Contains(sv(obj(v, "error"), "message"), "may have run") {
			t.Fatalf("running server tool call after the restart: %v", v)
		}
		if a := approvalByID(t, s, "CANCELLED", sv(ap, "approval_id")); a == nil || a["decided_by"] != "platform" {
			t.Fatalf("approval after the restart: %v", a)
		}
		if code, body := decide(s, sv(ap, "approval_id"), "approve"); code != http.StatusConflict {
			t.Fatalf("approving after the restart: %d %v", code, body)
		}
		c2 := dial(t, s, "alice", "alice-key")
		c2.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": approvalRun, "approval_id": ap["approval_id"], "decision": "approve"})
		if m := c2.nextReply(); m["type"] != "error" || m["request_id"] != "d1" {
			t.Fatalf("approval_decision after the restart answered %v", m)
		}
		c2.send(map[string]any{"type": "tool_result", "request_id": "r1", "run_id": clientRun, "tool_call_id": tr["tool_call_id"], "ok": true, "result": "late"})
		if m := c2.nextReply(); m["type"] != "error" || m["request_id"] != "r1" {
			t.Fatalf("tool_result after the restart answered %v", m)
		}
		c2.send(map[string]any{"type": "subscribe", "request_id": "s1", "session_id": tr["session_id"], "after_seq": tr["seq"]})
		for _, m := range c2.untilEnd() {
			if m["type"] == "tool_request" {
				t.Fatalf("a cancelled tool_request was sent again: %v", m)
			}
		}

		// A graceful stop fails a waiting run the same way, with its own code.
		// (A new agent process: the first one still calls the old address.)
		startPyToolAgent(t, s, "py-tools-2")
		c3 := dial(t, s, "alice", "alice-key")
		started = c3.invokeSpec("py-tools-2", "", map[string]any{"tool": "pay.transfer", "args": map[string]any{"amount": 10}})
		stoppedRun := sv(started, "run_id")
		msgs = c3.readUntilAll("approval_required", isType("approval_required"))
		ap = msgs[len(msgs)-1]
		s.stop()
		s.restart()
		run := waitRunEnded(t, s, stoppedRun)
		if run["status"] != "FAILED" || obj(run, "error")["code"] != "platform_shutdown" {
			t.Fatalf("run after a graceful stop: %v", run)
		}
		if v := toolCall(t, s, sv(ap, "tool_call_id")); v["state"] != "CANCELLED" {
			t.Fatalf("tool call after a graceful stop: %v", v)
		}
		if a := approvalByID(t, s, "CANCELLED", sv(ap, "approval_id")); a == nil {
			t.Fatalf("approval %v is not CANCELLED after a graceful stop", ap["approval_id"])
		}
		if code, body := decide(s, sv(ap, "approval_id"), "approve"); code != http.StatusConflict {
			t.Fatalf("approving after a graceful stop: %d %v", code, body)
		}
		assertExecutions(t, te, 1) // the slow tool, once: never sent again after the restart
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 10. Two processes on one PostgreSQL database.

func TestToolDeadlinesAndWakeupsAcrossProcesses(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "tools-a")
	b := startServer(t, dsn, "--instance-id", "tools-b")
	te := newToolEndpoint(t)

	t.Run("a wait on B is woken by a decision on A", func(t *testing.T) {
		putTool(t, a, "pay.approved", transferTool(te.URL, "return_to_agent", alwaysApproval))
		ga := startGoToolAgent(t, a, "go-tools")
		c := dial(t, a, "alice", "alice-key")
		c.invokeSpec("go-tools", "", map[string]any{"hold": true})
		runID := ga.held(t)

		code, call := a.call("POST", "/v1/tools/pay.approved:invoke", ga.key, map[string]any{"run_id": runID, "args": map[string]any{"amount": 42}}, "x-run-id", runID)
		if code != http.StatusOK || call["status"] != "pending" || call["state"] != "WAITING_APPROVAL" || sv(call, "approval_id") == "" {
			t.Fatalf("invoke on A: %d %v", code, call)
		}
		type answer struct {
			code int
			body map[string]any
			err  error
		}
		waited := make(chan answer, 1)
		go func() {
			code, body, err := httpJSON("POST", b.URL+"/v1/tool_calls/"+sv(call, "tool_call_id")+":wait?timeout_ms=110000", ga.key, nil)
			waited <- answer{code, body, err}
		}()
		waitMetric(t, b, "agentplane_tool_waits_pending", func(v float64) bool { return v >= 1 })
		if code, body := decide(a, sv(call, "approval_id"), "approve"); code != http.StatusOK {
			t.Fatalf("approve on A: %d %v", code, body)
		}
		var w answer
		select {
		case w = <-waited:
		case <-time.After(150 * time.Second):
			t.Fatalf("the wait on B never returned")
		}
		if w.err != nil || w.code != http.StatusOK || w.body["status"] != "succeeded" || w.body["state"] != "SUCCEEDED" || num(obj(w.body, "result"), "n") != 1 {
			t.Fatalf("the wait on B returned %d %v %v; want the call succeeded (woken, not timed out)", w.code, w.body, w.err)
		}
		ga.releaseAll()
		if line := singleLine(t, c.untilEnd()); line != "released" {
			t.Fatalf("go agent replied %q", line)
		}
		waitRunEnded(t, a, runID)
		assertExecutions(t, te, 1)
	})

	t.Run("B expires an approval created on A after A dies", func(t *testing.T) {
		expiring := transferTool(te.URL, "return_to_agent", alwaysApproval)
		expiring["approval_timeout_ms"] = 3000
		putTool(t, a, "pay.expiring", expiring)
		startPyToolAgent(t, a, "py-tools")
		c := dial(t, a, "alice", "alice-key")
		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.expiring", "args": map[string]any{"amount": 7}})
		runID := sv(started, "run_id")
		msgs := c.readUntilAll("approval_required", isType("approval_required"))
		ap := msgs[len(msgs)-1]
		callID, apID := sv(ap, "tool_call_id"), sv(ap, "approval_id")
		a.kill()

		first := toolCall(t, b, callID)
		if first["state"] != "WAITING_APPROVAL" {
			// A slow machine: A reached the deadline before it died. The
			// outcome must be the same; only who swept it differs.
			t.Logf("the call was already %v when A was killed", first["state"])
		}
		deadline := time.Now().Add(60 * time.Second)
		v := first
		for v["status"] == "pending" {
			if time.Now().After(deadline) {
				t.Fatalf("B never expired the call: %v", v)
			}
			time.Sleep(50 * time.Millisecond)
			v = toolCall(t, b, callID)
		}
		if v["state"] != "EXPIRED" || sv(obj(v, "error"), "code") != "expired" {
			t.Fatalf("call after its approval deadline: %v", v)
		}
		if got := approvalByID(t, b, "EXPIRED", apID); got == nil || got["decided_by"] != "platform" {
			t.Fatalf("approval after its deadline: %v", got)
		}
		code, body := decide(b, apID, "approve")
		if code != http.StatusConflict {
			t.Fatalf("approving an expired approval on B: %d %v", code, body)
		}

		// A comes back and fails the run it was driving.
		a.restart()
		if run := waitRunEnded(t, b, runID); run["status"] != "FAILED" || obj(run, "error")["code"] != "platform_restarted" {
			t.Fatalf("run %v", run)
		}
		if v := toolCall(t, b, callID); v["state"] != "EXPIRED" {
			t.Fatalf("the restart changed the expired call: %v", v)
		}
		assertExecutions(t, te, 1)
	})
	assertSettled(t, dsn)
}

// ---------------------------------------------------------------------------
// 11. The registry over HTTP.

func TestToolRegistryOverHTTP(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		echoSchema := map[string]any{"type": "object", "required": []any{"x"}, "properties": map[string]any{"x": map[string]any{"type": "integer", "description": "a number"}}}
		good := map[string]any{"kind": "server", "description": "Echoes x.", "endpoint": te.URL, "parameters": echoSchema, "policy": map[string]any{"decision": "allow"}}
		with := func(k string, v any) map[string]any {
			d := map[string]any{}
			for kk, vv := range good {
				d[kk] = vv
			}
			d[k] = v
			return d
		}

		bad := []struct {
			name string
			def  any
			code string // "" = any 400
		}{
			{"invalid CEL", with("policy", map[string]any{"decision": "allow", "rules": []any{map[string]any{"when": "args.amount >", "decision": "block"}}}), "invalid_tool"},
			{"CEL not a bool", with("policy", map[string]any{"decision": "allow", "rules": []any{map[string]any{"when": "args.amount + 1", "decision": "block"}}}), "invalid_tool"},
			{"CEL unknown variable", with("policy", map[string]any{"decision": "allow", "rules": []any{map[string]any{"when": "secrets.x == 1", "decision": "block"}}}), "invalid_tool"},
			{"unknown decision", with("policy", map[string]any{"decision": "perhaps"}), "invalid_tool"},
			{"schema not an object", with("parameters", map[string]any{"type": "string"}), ""},
			{"schema invalid", with("parameters", map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "nonsense"}}}), ""},
			{"unknown field", `{"kind":"server","endpoint":"` + te.URL + `","polcy":{"decision":"block"}}`, ""},
			{"metadata endpoint", with("endpoint", "http://169.254.169.254/latest/meta-data"), ""},
			{"server tool without endpoint", with("endpoint", ""), ""},
			{"bad kind", with("kind", "magic"), ""},
			{"bad on_failure", with("on_failure", "shrug"), ""},
			{"timeout out of range", with("timeout_ms", -5), ""},
		}
		for _, b := range bad {
			code, body := s.call("PUT", "/v1/tools/srv.bad", adminKey, b.def)
			if code != http.StatusBadRequest || (b.code != "" && errCode(body) != b.code) || errCode(body) == "" {
				t.Errorf("%s: %d %v, want 400 %s", b.name, code, body, b.code)
			}
		}
		if code, body := s.call("PUT", "/v1/tools/srv.bad", adminKey, with("policy", map[string]any{"decision": "allow", "rules": []any{map[string]any{"when": "args.amount >", "decision": "block"}}})); !strings.Contains(fmt.Sprint(body), "policy.rules[0].when") {
			t.Errorf("invalid CEL: %d %v does not name the field", code, body)
		}
		if code, _ := s.call("GET", "/v1/tools/srv.bad", adminKey, nil); code != http.StatusNotFound {
			t.Fatalf("a refused tool was stored: %d", code)
		}

		// Who may register.
		lister := newScriptedAgent(t, modeStream, 1)
		listerKey := s.register("lister", lister.URL)
		for _, k := range []string{"", "alice-key", listerKey, "wrong-key"} {
			if code, body := s.call("PUT", "/v1/tools/srv.echo", k, good); code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("PUT with key %q: %d %v", k, code, body)
			}
		}

		if code, body := s.call("PUT", "/v1/tools/srv.echo", adminKey, good); code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, body)
		}
		code, body := s.call("PUT", "/v1/tools/srv.echo", adminKey, good)
		if code != http.StatusOK || body["tool_name"] != "srv.echo" || num(body, "timeout_ms") != 60000 || num(body, "approval_timeout_ms") != 600000 || body["on_failure"] != "fail_run" {
			t.Fatalf("replace: %d %v (want the defaults filled in)", code, body)
		}
		// What GET answers can be edited and PUT back (its timestamps are
		// ignored).
		code, got := s.call("GET", "/v1/tools/srv.echo", adminKey, nil)
		got["description"] = "Echoes x, edited."
		if code, body := s.call("PUT", "/v1/tools/srv.echo", adminKey, got); code != http.StatusOK || body["description"] != "Echoes x, edited." || num(body, "created_at") != num(got, "created_at") {
			t.Fatalf("GET %d %v put back: %d %v", code, got, code, body)
		}
		if code, body := s.call("PUT", "/v1/tools/srv.echo", adminKey, good); code != http.StatusOK {
			t.Fatalf("restore: %d %v", code, body)
		}
		putTool(t, s, "ui.confirm", map[string]any{"kind": "client", "description": "Asks the user.", "agents": []any{"lister"}})
		putTool(t, s, "secret.tool", map[string]any{"kind": "client", "description": "Not for lister.", "agents": []any{"someone-else"}})
		if code, body := s.call("GET", "/v1/tools", adminKey, nil); code != http.StatusOK || len(body["tools"].([]any)) != 3 {
			t.Fatalf("admin list: %d %v", code, body)
		}

		// The agent's view: OpenAI function tools, for its own runs only.
		other := newScriptedAgent(t, modeStream, 1)
		s.register("other", other.URL)
		c := dial(t, s, "alice", "alice-key")
		runOf := func(agentID string) string {
			started := c.invokeSpec(agentID, "", map[string]any{})
			c.untilEnd()
			return sv(started, "run_id")
		}
		listerRun, otherRun := runOf("lister"), runOf("other")
		code, body = s.call("GET", "/v1/tools?run_id="+listerRun, listerKey, nil)
		if code != http.StatusOK {
			t.Fatalf("agent list: %d %v", code, body)
		}
		fns := map[string]map[string]any{}
		for _, x := range body["tools"].([]any) {
			ft := x.(map[string]any)
			if ft["type"] != "function" {
				t.Fatalf("tool %v is not a function tool", ft)
			}
			fn := obj(ft, "function")
			fns[sv(fn, "name")] = fn
		}
		if len(fns) != 2 || fns["srv__echo"] == nil || fns["ui__confirm"] == nil {
			t.Fatalf("lister may call %v, want srv__echo and ui__confirm", body)
		}
		if fn := fns["srv__echo"]; fn["description"] != "Echoes x." || obj(obj(obj(fn, "parameters"), "properties"), "x")["type"] != "integer" {
			t.Fatalf("srv__echo as a function: %v", fn)
		}
		if code, body := s.call("GET", "/v1/tools?run_id="+otherRun, listerKey, nil); code != http.StatusForbidden {
			t.Fatalf("listing with another agent's run: %d %v", code, body)
		}

		// Invoke refusals through HTTP.
		invoke := func(key, tool, runID string, args any) (int, map[string]any) {
			return s.call("POST", "/v1/tools/"+tool+":invoke", key, map[string]any{"run_id": runID, "args": args}, "x-run-id", runID)
		}
		for _, x := range []struct {
			name, key, tool, run string
			args                 any
			status               int
			code                 string
		}{
			{"args against the schema", listerKey, "srv.echo", listerRun, map[string]any{"x": "seven"}, 400, "invalid_args"},
			{"missing required arg", listerKey, "srv.echo", listerRun, map[string]any{}, 400, "invalid_args"},
			{"ended run", listerKey, "srv.echo", listerRun, map[string]any{"x": 7}, 409, "run_not_active"},
			{"another agent's run", listerKey, "srv.echo", otherRun, map[string]any{"x": 7}, 403, "forbidden"},
			{"tool not for this agent", listerKey, "secret.tool", listerRun, map[string]any{}, 403, "forbidden"},
			{"unknown tool", listerKey, "no.such.tool", listerRun, map[string]any{}, 404, "tool_not_found"},
			{"user key", "alice-key", "srv.echo", listerRun, map[string]any{"x": 7}, 403, ""},
			{"no run", listerKey, "srv.echo", "", map[string]any{"x": 7}, 400, "invalid_request"},
		} {
			code, body := invoke(x.key, x.tool, x.run, x.args)
			if code != x.status || (x.code != "" && errCode(body) != x.code) {
				t.Errorf("%s: %d %v, want %d %s", x.name, code, body, x.status, x.code)
			}
		}

		// The run may come in the x-run-id header alone, but not contradict it.
		if code, body := s.call("POST", "/v1/tools/srv.echo:invoke", listerKey, map[string]any{"args": map[string]any{"x": 7}}, "x-run-id", listerRun); code != http.StatusConflict || errCode(body) != "run_not_active" {
			t.Fatalf("run id in the header only: %d %v", code, body)
		}
		secondRun := runOf("lister")
		if code, body := s.call("POST", "/v1/tools/srv.echo:invoke", listerKey, map[string]any{"run_id": listerRun, "args": map[string]any{"x": 7}}, "x-run-id", secondRun); code != http.StatusBadRequest {
			t.Fatalf("x-run-id contradicting the body: %d %v", code, body)
		}
		// Another agent's run in the header is refused as such, whatever the body.
		if code, body := s.call("POST", "/v1/tools/srv.echo:invoke", listerKey, map[string]any{"run_id": listerRun, "args": map[string]any{"x": 7}}, "x-run-id", otherRun); code != http.StatusForbidden || errCode(body) != "forbidden" {
			t.Fatalf("x-run-id of another agent's run: %d %v", code, body)
		}

		if code, body := s.call("DELETE", "/v1/tools/srv.echo", adminKey, nil); code != http.StatusOK {
			t.Fatalf("delete: %d %v", code, body)
		}
		if code, body := s.call("GET", "/v1/tools/srv.echo", adminKey, nil); code != http.StatusNotFound || errCode(body) != "tool_not_found" {
			t.Fatalf("GET after delete: %d %v", code, body)
		}
		if code, _ := s.call("DELETE", "/v1/tools/srv.echo", adminKey, nil); code != http.StatusNotFound {
			t.Fatalf("second delete: %d", code)
		}
		if code, body := s.call("DELETE", "/v1/tools/ui.confirm", "alice-key", nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("user delete: %d %v", code, body)
		}
		if code, body := invoke(listerKey, "srv.echo", listerRun, map[string]any{"x": 7}); code != http.StatusNotFound {
			t.Fatalf("invoke after delete: %d %v", code, body)
		}
		assertExecutions(t, te, 0)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// 12. Tools declared in the config file.

func TestToolConfigFile(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		te := newToolEndpoint(t)
		dir := t.TempDir()
		cfg := filepath.Join(dir, "agentplane.yaml")
		os.WriteFile(cfg, []byte(`tools:
  - tool_name: cfg.transfer
    kind: server
    description: Moves money (declared in the config file).
    endpoint: `+te.URL+`
    on_failure: return_to_agent
    parameters:
      type: object
      required: [amount]
      properties:
        amount: {type: number}
    policy:
      decision: allow
      rules:
        - name: big
          when: args.amount > 100
          decision: require_approval
  - tool_name: cfg.ask
    kind: client
    description: Asks the user.
`), 0o600)
		s := startServerEnv(t, dsn, []string{"AGENTPLANE_CONFIG=" + cfg})

		code, def := s.call("GET", "/v1/tools/cfg.transfer", adminKey, nil)
		rules, _ := obj(def, "policy")["rules"].([]any)
		if code != http.StatusOK || def["endpoint"] != te.URL || len(rules) != 1 || rules[0].(map[string]any)["when"] != "args.amount > 100" || def["on_failure"] != "return_to_agent" {
			t.Fatalf("cfg.transfer: %d %v", code, def)
		}
		if code, def := s.call("GET", "/v1/tools/cfg.ask", adminKey, nil); code != http.StatusOK || def["kind"] != "client" {
			t.Fatalf("cfg.ask: %d %v", code, def)
		}

		// The configured rule decides real calls.
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")
		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "cfg.transfer", "args": map[string]any{"amount": 10}})
		if res := singleResult(t, c.untilEnd()); num(obj(res, "args"), "amount") != 10 {
			t.Fatalf("small transfer: %v", res)
		}
		waitRunEnded(t, s, sv(started, "run_id"))
		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "cfg.transfer", "args": map[string]any{"amount": 1000}})
		msgs := c.readUntilAll("approval_required", isType("approval_required"))
		if code, body := decide(s, sv(msgs[len(msgs)-1], "approval_id"), "reject"); code != http.StatusOK {
			t.Fatalf("reject: %d %v", code, body)
		}
		if line := singleLine(t, c.untilEnd()); line != "error:rejected" {
			t.Fatalf("big transfer: agent saw %q", line)
		}
		waitRunEnded(t, s, sv(started, "run_id"))
		assertExecutions(t, te, 1)
		assertSettled(t, dsn)

		// A bad rule stops the start with a message naming the tool and field.
		badCfg := filepath.Join(dir, "bad.yaml")
		os.WriteFile(badCfg, []byte(`tools:
  - tool_name: cfg.bad
    kind: client
    description: Its rule does not compile.
    policy:
      decision: allow
      rules:
        - when: args.amount >
          decision: block
`), 0o600)
		ctx := ctxTimeout(t, 90*time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "agentplane"), "serve", "--addr", "127.0.0.1:0", "--instance-id", "e2e-bad-config")
		cmd.Env = append(os.Environ(),
			"AGENTPLANE_DB="+dsn, "AGENTPLANE_ADMIN_KEY="+adminKey, "AGENTPLANE_API_KEYS="+apiKeys,
			"AGENTPLANE_ENDPOINT_ALLOWLIST=127.0.0.1/32", "AGENTPLANE_LLM_BASE_URL=", "AGENTPLANE_CONFIG="+badCfg)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("the server did not stop on a bad config:\n%s", out)
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("a bad config started the server (%v):\n%s", err, out)
		}
		if o := string(out); !strings.Contains(o, "cfg.bad") || !strings.Contains(o, "policy.rules[0].when") || strings.Contains(o, "agentplane listening") {
			t.Fatalf("bad config output does not say what is wrong:\n%s", out)
		}
	})
}

// ---------------------------------------------------------------------------
// Replicas: the client on one process, the agent's tool calls on another.

// A client tool finds the session's client wherever it is connected
// (DESIGN §8): each process records in the shared database which sessions
// it has connections for, and the process that dispatches the call asks
// there when it has none itself — also one started with --role orchestrator,
// which serves no WebSocket at all.
func TestClientToolAcrossReplicas(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "replica-a")
	b := startServer(t, dsn, "--instance-id", "replica-b")
	o := startServer(t, dsn, "--instance-id", "replica-o", "--role", "orchestrator")
	putTool(t, a, "ui.confirm", map[string]any{"kind": "client", "description": "Asks the user.", "on_failure": "return_to_agent"})
	startPyToolAgent(t, a, "py-tools")   // its tool calls go to A
	startPyToolAgent(t, o, "py-tools-o") // its tool calls go to O
	probe := newToolProbe(t)
	ctx := ctxTimeout(t, 120*time.Second)
	st, err := apserver.OpenStore(ctx, dsn)
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	defer st.Close()

	// answered runs a call of ui.confirm by agentID for a client on B and
	// answers it there.
	answered := func(t *testing.T, agentID, answer string) {
		t.Helper()
		c := dial(t, b, "alice", "alice-key") // the run is driven by B, the client follows it on B
		started := c.invokeSpec(agentID, "", map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "which replica?"}})
		runID := sv(started, "run_id")
		var tr map[string]any
		for tr == nil {
			m := c.next()
			if isEnd(m) {
				t.Fatalf("the run ended before the client, connected to another replica, was asked to run the tool; agent said %q (end %v)", strings.TrimSpace(text([]map[string]any{m})), m)
			}
			if m["type"] == "delta" && strings.HasPrefix(sv(m, "text"), "error:") {
				t.Fatalf("the agent's client tool call failed with %q although the session's client is connected (to replica B)", strings.TrimSpace(sv(m, "text")))
			}
			if m["type"] == "tool_request" {
				tr = m
			}
		}
		c.send(map[string]any{"type": "tool_result", "request_id": "r1", "run_id": runID, "tool_call_id": tr["tool_call_id"], "ok": true, "result": map[string]any{"answer": answer}})
		if res := singleResult(t, c.untilEnd()); res["answer"] != answer {
			t.Fatalf("agent got %v", res)
		}
		if run := waitRunEnded(t, b, runID); run["status"] != "DONE" {
			t.Fatalf("run %v", run)
		}
		c.conn.Close()
	}

	t.Run("client tool while the client is connected to another replica", func(t *testing.T) {
		answered(t, "py-tools", "B")
	})

	t.Run("client tool dispatched by an orchestrator-only process", func(t *testing.T) {
		answered(t, "py-tools-o", "B via O")
	})

	// An A2A request is its session's client while it follows the task
	// (DESIGN §12): its hold is recorded for the other replicas before the
	// run invokes the agent, whose tool calls go to A.
	t.Run("client tool of a run started over A2A on another replica", func(t *testing.T) {
		registerA2A(t, a, "py-tools", goToolAgentURL(t, a, "py-tools"), nil)
		c, _ := a2aDial(t, b, "py-tools", "alice-key", false)
		spec, _ := json.Marshal(map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "over A2A?"}})
		res, err := c.SendMessage(ctx, userMsg(string(spec)))
		if err != nil {
			t.Fatal(err)
		}
		task := res.(*a2a.Task)
		d := dataOf(task.Status.Message)
		if task.Status.State != a2a.TaskStateInputRequired || d["kind"] != "tool_request" || d["tool_name"] != "ui.confirm" {
			t.Fatalf("the client tool was not asked of the A2A client on B: %+v %v (output %q)", task.Status, d, artifactText(task))
		}
		res, err = c.SendMessage(ctx, answerMsg(task, a2a.NewDataPart(map[string]any{"tool_call_id": d["tool_call_id"], "ok": true, "result": map[string]any{"answer": "A2A on B"}})))
		if err != nil {
			t.Fatal(err)
		}
		if done := res.(*a2a.Task); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "A2A on B") {
			t.Fatalf("after the answer: %+v %q", done.Status, artifactText(done))
		}
	})

	t.Run("the client left: client_offline on the other replica", func(t *testing.T) {
		c := dial(t, b, "alice", "alice-key")
		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "anyone?"},
			"gate": probe.gateURL("left"), "report": probe.reportURL()})
		runID, sessionID := sv(started, "run_id"), sv(started, "session_id")
		if online, err := st.SessionHasClient(ctx, sessionID, 0); err != nil || !online {
			t.Fatalf("the session's client on B is not recorded (%v): another replica would fail its client tools", err)
		}
		c.conn.Close()
		deadline := time.Now().Add(30 * time.Second)
		for {
			online, err := st.SessionHasClient(ctx, sessionID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !online {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("B still records the session's client after it disconnected")
			}
			time.Sleep(20 * time.Millisecond)
		}
		probe.open("left") // the agent calls the tool, through A, only now
		rep := probe.nextReport(t)
		if rep["ok"] != false || rep["code"] != "client_offline" {
			t.Fatalf("agent's call with no client connected anywhere: %v", rep)
		}
		if v := toolCall(t, a, sv(rep, "tool_call_id")); v["state"] != "FAILED" || sv(obj(v, "error"), "code") != "client_offline" {
			t.Fatalf("tool call %v", v)
		}
		if run := waitRunEnded(t, b, runID); run["status"] != "DONE" {
			t.Fatalf("run %v", run)
		}
	})
	assertSettled(t, dsn)
}

// A run failed by a tool call on one process must end the agent's stream on
// the process driving it, and nothing of the agent may be logged after the
// run's terminal event (the driver hears of the end through the PostgreSQL
// notification; agent output is appended only while the run is active).
func TestToolCallsAcrossReplicas(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "replica-a")
	b := startServer(t, dsn, "--instance-id", "replica-b")
	te := newToolEndpoint(t)
	putTool(t, a, "srv.blocked.strict", transferTool(te.URL, "fail_run", map[string]any{"decision": "block"}))
	startPyToolAgent(t, a, "py-tools") // its tool calls go to A

	t.Run("a tool failure on another replica ends the agent's stream", func(t *testing.T) {
		c := dial(t, b, "alice", "alice-key")
		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.blocked.strict", "args": map[string]any{"amount": 1}})
		runID := sv(started, "run_id")
		msgs := c.untilEnd()
		if end := msgs[len(msgs)-1]; end["type"] != "error" || end["code"] != "blocked" {
			t.Fatalf("run ended with %v", end)
		}
		waitRunEnded(t, b, runID)
		// Nothing of the agent may be logged after the run failed.
		time.Sleep(2 * time.Second) // the agent's last delta, if any, has been streamed by now
		failedAt := int64(-1)
		for _, e := range b.events("/v1/runs/" + runID + "/events") {
			switch {
			case e["type"] == "run_failed":
				failedAt = int64(num(e, "seq"))
			case failedAt >= 0:
				t.Errorf("event %s (seq %v, %v) logged after the run failed", e["type"], e["seq"], payload(e))
			}
		}
	})
	assertExecutions(t, te, 0)
	assertSettled(t, dsn)
}

// ---------------------------------------------------------------------------
// Server tools that fail: HTTP errors, bad answers, timeouts, dead endpoints.

func TestToolServerFailures(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		down := httptest.NewServer(http.NotFoundHandler())
		downURL := down.URL
		down.Close() // nothing listens there any more
		tool := func(name, endpoint, onFailure string, timeoutMS int) {
			def := transferTool(endpoint, onFailure, map[string]any{"decision": "allow"})
			if timeoutMS > 0 {
				def["timeout_ms"] = timeoutMS
			}
			putTool(t, s, name, def)
		}
		tool("srv.500", te.URL+"/500", "return_to_agent", 0)
		tool("srv.notjson", te.URL+"/notjson", "return_to_agent", 0)
		tool("srv.slow", te.URL+"/slow", "return_to_agent", 500)
		tool("srv.slow.default", te.URL+"/slow", "return_to_agent", 0)
		tool("srv.down", downURL, "return_to_agent", 0)
		tool("srv.500.strict", te.URL+"/500", "fail_run", 0)
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		for _, x := range []struct {
			tool      string
			timeoutMS int // the call's own timeout_ms
			want      string
			ran       int
		}{
			{"srv.500", 0, "error:tool_http_error", 1},
			{"srv.notjson", 0, "error:tool_protocol_error", 2},
			{"srv.slow", 0, "error:timeout", 3},
			{"srv.slow.default", 500, "error:timeout", 4},
			{"srv.down", 0, "error:tool_unreachable", 4},
		} {
			spec := map[string]any{"tool": x.tool, "args": map[string]any{"amount": 1}}
			if x.timeoutMS > 0 {
				spec["timeout_ms"] = x.timeoutMS
			}
			started := c.invokeSpec("py-tools", "", spec)
			if line := singleLine(t, c.untilEnd()); line != x.want {
				t.Fatalf("%s: agent saw %q, want %s", x.tool, line, x.want)
			}
			if run := waitRunEnded(t, s, sv(started, "run_id")); run["status"] != "DONE" {
				t.Fatalf("%s: run %v", x.tool, run)
			}
			assertExecutions(t, te, x.ran)
			if x.tool == "srv.500" {
				// What the tool said is kept as the error's detail.
				var detail map[string]any
				for _, e := range s.events("/v1/sessions/" + sv(started, "session_id") + "/events") {
					if e["type"] == "tool_result" {
						detail = obj(obj(payload(e), "error"), "detail")
					}
				}
				if detail["error"] != "boom" {
					t.Fatalf("tool_result of an HTTP 500 has detail %v", detail)
				}
			}
		}

		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "srv.500.strict", "args": map[string]any{"amount": 1}})
		msgs := c.untilEnd()
		end := msgs[len(msgs)-1]
		if end["type"] != "error" || end["code"] != "tool_http_error" || sv(end, "tool_call_id") == "" {
			t.Fatalf("run ended with %v, want error tool_http_error", end)
		}
		if run := waitRunEnded(t, s, sv(started, "run_id")); run["status"] != "FAILED" || obj(run, "error")["code"] != "tool_http_error" {
			t.Fatalf("run %v", run)
		}
		assertExecutions(t, te, 5)
		assertSettled(t, dsn)
	})
}

// ---------------------------------------------------------------------------
// Approvals nobody decides expire (distinct from a rejection).

func TestToolApprovalExpiry(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		for name, onFailure := range map[string]string{"pay.expire": "return_to_agent", "pay.expire.strict": "fail_run"} {
			def := transferTool(te.URL, onFailure, alwaysApproval)
			def["approval_timeout_ms"] = 1000
			putTool(t, s, name, def)
		}
		startPyToolAgent(t, s, "py-tools")
		c := dial(t, s, "alice", "alice-key")

		started := c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.expire", "args": map[string]any{"amount": 1}})
		runID := sv(started, "run_id")
		msgs := c.readUntilAll("approval_required", isType("approval_required"))
		ap := msgs[len(msgs)-1]
		msgs = c.untilEnd() // nobody decides
		if line := singleLine(t, msgs); line != "error:expired" {
			t.Fatalf("agent saw %q, want error:expired", line)
		}
		running := find(t, msgs, "RUNNING state", isState("RUNNING"))
		if d := obj(running, "detail"); sv(d, "outcome") != "EXPIRED" || d["approval_id"] != ap["approval_id"] {
			t.Fatalf("RUNNING state %v", running)
		}
		if a := approvalByID(t, s, "EXPIRED", sv(ap, "approval_id")); a == nil || a["decided_by"] != "platform" {
			t.Fatalf("approval after its deadline: %v", a)
		}
		if v := toolCall(t, s, sv(ap, "tool_call_id")); v["state"] != "EXPIRED" || sv(obj(v, "error"), "code") != "expired" {
			t.Fatalf("tool call %v", v)
		}
		code, body := decide(s, sv(ap, "approval_id"), "approve")
		if code != http.StatusConflict || errCode(body) != "approval_expired" {
			t.Fatalf("a decision after the expiry: %d %v", code, body)
		}
		c.send(map[string]any{"type": "approval_decision", "request_id": "late", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve"})
		if m := c.nextReply(); m["type"] != "error" || m["request_id"] != "late" || m["code"] != "approval_expired" {
			t.Fatalf("a late approval_decision answered %v", m)
		}
		if run := waitRunEnded(t, s, runID); run["status"] != "DONE" {
			t.Fatalf("run %v", run)
		}

		started = c.invokeSpec("py-tools", "", map[string]any{"tool": "pay.expire.strict", "args": map[string]any{"amount": 1}})
		msgs = c.untilEnd()
		ap = find(t, msgs, "approval_required", isType("approval_required"))
		end := msgs[len(msgs)-1]
		if end["type"] != "error" || end["code"] != "expired" || end["tool_call_id"] != ap["tool_call_id"] {
			t.Fatalf("run ended with %v, want error expired", end)
		}
		if run := waitRunEnded(t, s, sv(started, "run_id")); run["status"] != "FAILED" || obj(run, "error")["code"] != "expired" {
			t.Fatalf("run %v", run)
		}
		assertExecutions(t, te, 0)
		assertSettled(t, dsn)
	})
}
