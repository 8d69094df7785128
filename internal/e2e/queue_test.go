package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// gateAgent is an agent (Go SDK) that reports each run it is invoked for,
// in order, and holds a run whose message is "hold" until the test
// releases it; any other message is answered at once.
type gateAgent struct {
	srv     *httptest.Server
	started chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
}

func startGateAgent(t *testing.T, s *server, agentID string) *gateAgent {
	t.Helper()
	ga := &gateAgent{started: make(chan string, 256), gates: map[string]chan struct{}{}}
	var h atomic.Pointer[agentplane.AgentHandler]
	ga.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := h.Load(); a != nil {
			a.ServeHTTP(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() {
		ga.mu.Lock()
		for _, g := range ga.gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
		ga.mu.Unlock()
		ga.srv.CloseClientConnections()
		ga.srv.Close()
	})
	key := s.register(agentID, ga.srv.URL)
	h.Store(&agentplane.AgentHandler{Platform: agentplane.NewClient(s.URL, key), Handler: func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		ga.started <- req.RunID
		if req.InputMessage.Content == "hold" {
			select {
			case <-ga.gate(req.RunID):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return st.Delta("ok")
	}})
	return ga
}

func (ga *gateAgent) gate(runID string) chan struct{} {
	ga.mu.Lock()
	defer ga.mu.Unlock()
	g := ga.gates[runID]
	if g == nil {
		g = make(chan struct{})
		ga.gates[runID] = g
	}
	return g
}

func (ga *gateAgent) release(runID string) { close(ga.gate(runID)) }

// next waits for the agent's next invocation.
func (ga *gateAgent) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-ga.started:
		return id
	case <-time.After(60 * time.Second):
		t.Fatal("the agent was not invoked")
		return ""
	}
}

// noneStarted checks the agent is not invoked for a while (a queued run
// must not start).
func (ga *gateAgent) noneStarted(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case id := <-ga.started:
		t.Fatalf("run %s started while it should wait", id)
	case <-time.After(within):
	}
}

// invoke sends an agent_invoke with content and returns the first logged
// message of the run (run_started, or state QUEUED), or the reply that
// refused it.
func (c *client) invoke(agentID, content string) map[string]any {
	c.t.Helper()
	c.send(map[string]any{"type": "agent_invoke", "request_id": "inv", "agent_id": agentID, "message": map[string]any{"role": "user", "content": content}})
	for {
		m := c.next()
		if m["seq"] == nil || m["type"] == "run_started" || (m["type"] == "state" && m["source"] == "platform") {
			return m
		}
	}
}

// untilState reads until the platform's state st (and returns it).
func (c *client) untilState(st string) map[string]any {
	c.t.Helper()
	for {
		m := c.next()
		if m["type"] == "state" && m["source"] == "platform" && m["state"] == st {
			return m
		}
	}
}

// Per-user cap (limits.max_active_runs_per_user: 1, seed 003 §7.1): a
// user's second root run is refused user_busy while the first is active,
// in another session too, on another replica too (PostgreSQL); another
// user is not affected; a second run in the same session is session_busy
// as ever; once the first ends the user may start again.
func TestPerUserRunCap(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		cfg := writeConfig(t, "limits: {max_active_runs_per_user: 1}\n")
		s := startServerEnv(t, dsn, cfg)
		ga := startGateAgent(t, s, "gate")
		alice := dial(t, s, "alice", "alice-key")
		first := alice.invoke("gate", "hold")
		if first["type"] != "run_started" {
			t.Fatalf("first run: %v", first)
		}
		runID := ga.next(t)
		other := dial(t, s, "alice", "alice-key")
		if m := other.invoke("gate", "go"); m["type"] != "error" || m["code"] != "user_busy" {
			t.Fatalf("a second root run of the user: %v", m)
		}
		other.send(map[string]any{"type": "agent_invoke", "request_id": "same", "session_id": sv(first, "session_id"), "agent_id": "gate", "message": map[string]any{"role": "user", "content": "go"}})
		if m := other.replyTo("same"); m["code"] != "session_busy" {
			t.Fatalf("a second run in the same session: %v", m)
		}
		bob := dial(t, s, "bob", "bob-key")
		if m := bob.invoke("gate", "go"); m["type"] != "run_started" {
			t.Fatalf("another user: %v", m)
		}
		ga.next(t)
		if s.dsn[:6] != "sqlite" {
			// The cap holds on another replica too.
			b := startServerEnv(t, dsn, cfg, "--instance-id", "cap-b")
			if m := dial(t, b, "alice", "alice-key").invoke("gate", "go"); m["type"] != "error" || m["code"] != "user_busy" {
				t.Fatalf("on the other replica: %v", m)
			}
		}
		ga.release(runID)
		alice.untilEnd()
		if m := other.invoke("gate", "go"); m["type"] != "run_started" {
			t.Fatalf("after the first ended: %v", m)
		}
	})
}

// The global cap (limits.max_active_runs: 2) queues root runs first in
// first out: each waits QUEUED with its position, told again as the queue
// moves; a queued run can be cancelled (and is never started); queued runs
// start in order as slots free.
func TestGlobalRunQueue(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServerEnv(t, dsn, writeConfig(t, "limits: {max_active_runs: 2}\n"))
		ga := startGateAgent(t, s, "gate")
		users := [][2]string{{"alice", "alice-key"}, {"bob", "bob-key"}}
		var clients []*client
		var runs, sessions []string
		for i := range 5 {
			u := users[i%2]
			c := dial(t, s, u[0], u[1])
			m := c.invoke("gate", "hold")
			clients, runs, sessions = append(clients, c), append(runs, sv(m, "run_id")), append(sessions, sv(m, "session_id"))
			switch {
			case i < 2 && m["type"] != "run_started":
				t.Fatalf("run %d: %v", i, m)
			case i >= 2 && (m["state"] != "QUEUED" || num(obj(m, "detail"), "position") != float64(i-1)):
				t.Fatalf("run %d: %v, want QUEUED at position %d", i, m, i-1)
			}
		}
		started := []string{ga.next(t), ga.next(t)}
		if runStatus(t, s, runs[2]) != "QUEUED" {
			t.Fatalf("run 2 is %s", runStatus(t, s, runs[2]))
		}
		// A second run in a queued run's session is session_busy.
		clients[3].send(map[string]any{"type": "agent_invoke", "request_id": "same", "session_id": sessions[3], "agent_id": "gate", "message": map[string]any{"role": "user", "content": "x"}})
		if m := clients[3].replyTo("same"); m["code"] != "session_busy" {
			t.Fatalf("a second run in a queued run's session: %v", m)
		}
		// Cancel the run at position 2: the one behind moves up.
		clients[3].send(map[string]any{"type": "cancel_run", "request_id": "c", "run_id": runs[3]})
		clients[3].untilState("CANCELLED")
		if m := clients[4].untilState("QUEUED"); num(obj(m, "detail"), "position") != 2 {
			t.Fatalf("position after the cancel: %v", m)
		}
		ga.noneStarted(t, 500*time.Millisecond)
		ga.release(started[0])
		if m := clients[2].untilType("run_started"); sv(m, "run_id") != runs[2] {
			t.Fatalf("admitted %v", m)
		}
		if id := ga.next(t); id != runs[2] {
			t.Fatalf("the agent got %s, want the queue's head %s", id, runs[2])
		}
		if m := clients[4].untilState("QUEUED"); num(obj(m, "detail"), "position") != 1 {
			t.Fatalf("position after an admission: %v", m)
		}
		ga.release(started[1])
		if id := ga.next(t); id != runs[4] {
			t.Fatalf("the agent got %s, want %s", id, runs[4])
		}
		ga.release(runs[2])
		ga.release(runs[4])
		for _, i := range []int{0, 1, 2, 4} {
			if r := waitRunEnded(t, s, runs[i]); r["status"] != "DONE" {
				t.Fatalf("run %d ended %v", i, r)
			}
		}
		if r := waitRunEnded(t, s, runs[3]); r["status"] != "CANCELLED" {
			t.Fatalf("the cancelled queued run: %v", r)
		}
		for _, e := range s.events("/v1/runs/" + runs[3] + "/events") {
			if e["type"] == "run_started" {
				t.Fatal("the cancelled queued run was started")
			}
		}
	})
}

// untilType reads until a message of type typ.
func (c *client) untilType(typ string) map[string]any {
	c.t.Helper()
	for {
		if m := c.next(); m["type"] == typ {
			return m
		}
	}
}

// The queue is in the database: a process killed (SIGKILL) with runs
// queued is restarted, fails the run it was driving (platform_restarted),
// and admits the queued runs in their order.
func TestRunQueueSurvivesRestart(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServerEnv(t, dsn, writeConfig(t, "limits: {max_active_runs: 1}\n"))
		ga := startGateAgent(t, s, "gate")
		c := dial(t, s, "alice", "alice-key")
		first := sv(c.invoke("gate", "hold"), "run_id")
		ga.next(t)
		var queued []string
		for i := range 3 {
			m := dial(t, s, "bob", "bob-key").invoke("gate", "go")
			if m["state"] != "QUEUED" {
				t.Fatalf("run %d: %v", i, m)
			}
			queued = append(queued, sv(m, "run_id"))
		}
		s.kill()
		s.restart()
		var order []string
		for range queued {
			order = append(order, ga.next(t))
		}
		if !slices.Equal(order, queued) {
			t.Fatalf("admitted %v, want the queue's order %v", order, queued)
		}
		for _, id := range queued {
			if r := waitRunEnded(t, s, id); r["status"] != "DONE" {
				t.Fatalf("queued run %s ended %v", id, r)
			}
		}
		if r := waitRunEnded(t, s, first); r["status"] != "FAILED" || sv(obj(r, "error"), "code") != "platform_restarted" {
			t.Fatalf("the run driven by the killed process: %v", r)
		}
	})
}

// With replicas on PostgreSQL the cap is global: a run started on one
// replica while the other's run takes the only slot waits, and is admitted
// when that run ends.
func TestRunQueueAcrossReplicas(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	cfg := writeConfig(t, "limits: {max_active_runs: 1}\n")
	a := startServerEnv(t, dsn, cfg, "--instance-id", "q-a")
	b := startServerEnv(t, dsn, cfg, "--instance-id", "q-b")
	ga := startGateAgent(t, a, "gate")
	first := dial(t, a, "alice", "alice-key")
	runID := sv(first.invoke("gate", "hold"), "run_id")
	ga.next(t)
	c := dial(t, b, "bob", "bob-key")
	m := c.invoke("gate", "go")
	if m["state"] != "QUEUED" || num(obj(m, "detail"), "position") != 1 {
		t.Fatalf("on the other replica: %v", m)
	}
	ga.noneStarted(t, 500*time.Millisecond)
	ga.release(runID)
	if id := ga.next(t); id != sv(m, "run_id") {
		t.Fatalf("admitted %s", id)
	}
	if end := c.untilEnd(); end[len(end)-1]["type"] != "done" {
		t.Fatalf("the queued run ended %v", end[len(end)-1])
	}
}
