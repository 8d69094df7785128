package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
)

// harness is a tool service over a real store and event log, a real run
// manager (for cancel and its cascade hook) and a real HTTP tool server
// that counts how often each call reached it.
type harness struct {
	t    testing.TB
	ctx  context.Context
	st   store.Store
	log  *eventlog.Log
	svc  *Service
	runs *run.Manager

	skew   atomic.Int64 // ms added to the clock
	online sync.Map     // session id -> true when "a client is connected"

	srv      *httptest.Server
	mu       sync.Mutex
	execs    map[string]int // tool_call_id -> requests received
	keys     map[string]string
	behave   func(w http.ResponseWriter, r *http.Request, body map[string]any)
	received chan string
}

func newHarness(t testing.TB, dialect string) *harness {
	h := &harness{t: t, ctx: context.Background(), execs: map[string]int{}, keys: map[string]string{}, received: make(chan string, 1000)}
	h.st = testdb.Open(t, dialect)
	h.log = eventlog.New(h.st, eventlog.Options{Origin: "test"})
	clock := func() time.Time { return time.Now().Add(time.Duration(h.skew.Load()) * time.Millisecond) }
	h.svc = New(h.log, Options{Now: clock, SweepInterval: time.Hour, InlineWait: 5 * time.Second,
		// As the server composes it: this process's clients, then the
		// store's presence rows, read in the dispatching transaction.
		ClientConnected: func(ctx context.Context, q store.Queries, s string) (bool, error) {
			if _, ok := h.online.Load(s); ok {
				return true, nil
			}
			return q.SessionHasClient(ctx, s, 0)
		}})
	// Agents (the children of call_<agent> calls) live on loopback.
	allow, err := agent.ParseAllowlist("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	h.runs = run.New(h.log, run.Options{InstanceID: "test", Invoker: &agent.Client{HTTP: agent.NewHTTPClient(allow)},
		OnEnd: h.svc.OnRunEnd, OnChildEnd: h.svc.OnChildEnd, MaxCallDepth: 2, HeartbeatInterval: time.Hour, Now: clock})
	h.svc.SetRuns(h.runs)
	h.srv = httptest.NewServer(http.HandlerFunc(h.serveTool))
	t.Cleanup(func() {
		h.srv.Close()
		h.runs.Shutdown(context.Background())
		h.svc.Stop()
		h.log.Stop()
	})
	return h
}

// serveTool is the server tool's endpoint.
func (h *harness) serveTool(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	json.Unmarshal(raw, &body)
	id, _ := body["tool_call_id"].(string)
	h.mu.Lock()
	h.execs[id]++
	h.keys[id] = r.Header.Get("Idempotency-Key")
	behave := h.behave
	h.mu.Unlock()
	h.received <- id
	if behave != nil {
		behave(w, r, body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"echo": body["args"]})
}

func (h *harness) executions(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.execs[id]
}

func (h *harness) totalExecutions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.execs {
		n += c
	}
	return n
}

// put registers a tool; serverTool points it at the harness endpoint.
func (h *harness) put(d tool.Definition) {
	h.t.Helper()
	if d.Kind == "" && !isAgentTool(d.Name) {
		d.Kind = tool.KindServer
	}
	if d.Kind == tool.KindServer && d.Endpoint == "" {
		d.Endpoint = h.srv.URL + "/tool"
	}
	if _, _, err := h.svc.PutTool(h.ctx, d); err != nil {
		h.t.Fatalf("put tool %s: %v", d.Name, err)
	}
}

// newRun makes a session and a RUNNING run of agent "agent-a" for user "alice".
func (h *harness) newRun() *store.Run {
	h.t.Helper()
	now := time.Now().UnixMilli()
	sid := ids.New("ses")
	if _, err := h.st.SessionCreate(h.ctx, &store.SessionCreateParams{SessionID: sid, UserID: "alice", CreatedAt: now}); err != nil {
		h.t.Fatal(err)
	}
	r, err := h.st.RunInsert(h.ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "agent-a", UserID: "alice", Owner: "test", StartedAt: now,
		IntentionID: ids.New("int")})
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) invoke(r *store.Run, name, args, key string) (*CallView, error) {
	return h.svc.Invoke(h.ctx, InvokeParams{AgentID: r.AgentID, RunID: r.RunID, ToolName: name, Args: json.RawMessage(args), IdempotencyKey: key})
}

func (h *harness) mustInvoke(r *store.Run, name, args string) *CallView {
	h.t.Helper()
	v, err := h.invoke(r, name, args, "")
	if err != nil {
		h.t.Fatalf("invoke %s: %v", name, err)
	}
	return v
}

func (h *harness) call(id string) *store.ToolCall {
	h.t.Helper()
	c, err := h.st.ToolCallGet(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) runStatus(id string) *store.Run {
	h.t.Helper()
	r, err := h.st.RunGet(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// eventTypes lists the run's event types in seq order.
func (h *harness) eventTypes(runID string) []string {
	h.t.Helper()
	evs, err := h.st.EventsList(h.ctx, &store.EventsListParams{RunID: runID, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
		if e.Type == eventlog.TypeState {
			var p struct{ State string }
			json.Unmarshal(e.Payload, &p)
			out[i] += ":" + p.State
		}
	}
	return out
}

// finish ends every run still active (as an agent finishing would) and
// checks that nothing is left waiting: no run and no tool call
// non-terminal, no approval pending.
func (h *harness) finish() {
	h.t.Helper()
	active, err := h.st.RunListActive(h.ctx, &store.RunListActiveParams{Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range active {
		// A child is cancelled with its parent: it may have ended already.
		if _, err := h.runs.Cancel(h.ctx, run.CancelParams{RunID: r.RunID, Reason: "test over"}); err != nil && !errors.Is(err, run.ErrRunNotActive) {
			h.t.Fatalf("cancel %s: %v", r.RunID, err)
		}
	}
	h.assertSettled()
}

func (h *harness) assertSettled() {
	h.t.Helper()
	active, _ := h.st.RunListActive(h.ctx, &store.RunListActiveParams{Limit: 1000})
	if len(active) > 0 {
		h.t.Errorf("%d runs left non-terminal, first %s %s", len(active), active[0].RunID, active[0].Status)
	}
	for _, r := range active {
		calls, _ := h.st.ToolCallListActiveByRun(h.ctx, r.RunID)
		for _, c := range calls {
			h.t.Errorf("tool call %s left %s", c.ToolCallID, c.Status)
		}
	}
	pending, _ := h.st.ApprovalList(h.ctx, &store.ApprovalListParams{Status: store.ApprovalPending, Limit: 100})
	if len(pending) > 0 {
		h.t.Errorf("%d approvals left pending", len(pending))
	}
	due, _ := h.st.ToolCallListDue(h.ctx, &store.ToolCallListDueParams{Now: 1 << 62, Limit: 10})
	for _, c := range due {
		h.t.Errorf("tool call %s left %s", c.ToolCallID, c.Status)
	}
}

// dispatchedCall puts a server call of r in DISPATCHED straight through the
// store, as a dispatch committed just before its claim would leave it.
func (h *harness) dispatchedCall(r *store.Run, name string) *store.ToolCall {
	h.t.Helper()
	now := time.Now().UnixMilli()
	c, err := h.st.ToolCallInsert(h.ctx, &store.ToolCallInsertParams{ToolCallID: ids.New("tc"), RunID: r.RunID, SessionID: r.SessionID, AgentID: r.AgentID, ToolName: name, Kind: store.ToolKindServer, TimeoutMS: 60000, At: now})
	if err != nil {
		h.t.Fatal(err)
	}
	if c, err = h.st.ToolCallTransition(h.ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallCreated}, Status: store.ToolCallPolicyChecked, At: now}); err != nil {
		h.t.Fatal(err)
	}
	deadline := now + 60000
	if c, err = h.st.ToolCallTransition(h.ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Status: store.ToolCallDispatched, At: now, DeadlineAt: &deadline}); err != nil {
		h.t.Fatal(err)
	}
	return c
}
