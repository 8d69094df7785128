package run

// Child runs (issue 9, DESIGN §11) in the run manager: started by a
// running agent (its handler calls StartChild, as the platform's HTTP
// handler does for POST /v1/agents/{id}:invoke), driven like root runs
// against real HTTP agents, and ended as a tree. Both stores.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// sseOut writes an agent's answer.
type sseOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (o *sseOut) send(event string, data any) error {
	b, _ := json.Marshal(data)
	if _, err := fmt.Fprintf(o.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return o.rc.Flush()
}
func (o *sseOut) delta(text string) error { return o.send("delta", map[string]string{"text": text}) }
func (o *sseOut) done(usage any) error    { return o.send("done", map[string]any{"usage": usage}) }

// invokeBody is what an agent got.
type invokeBody struct {
	AgentID      string          `json:"agent_id"`
	SessionID    string          `json:"session_id"`
	RunID        string          `json:"run_id"`
	ParentRunID  string          `json:"parent_run_id"`
	Depth        int             `json:"depth"`
	InputMessage agent.Message   `json:"input_message"`
	Messages     []agent.Message `json:"messages"`
	IntentionID  string          `json:"intention_id"`
	ResumesRunID string          `json:"resumes_run_id"`
}

type agentFunc func(ctx context.Context, in invokeBody, out *sseOut) error

// treeHarness is a run manager over a real store with real HTTP agents
// that record what they were sent and when their request was closed.
type treeHarness struct {
	t   *testing.T
	st  store.Store
	log *eventlog.Log
	m   *Manager

	mu     sync.Mutex
	bodies map[string][]invokeBody // agent id -> invokes, in order
	closed chan string             // run ids whose request the platform closed
	begun  chan string             // run ids as their agent is invoked
}

func newTreeHarness(t *testing.T, dialect string, opts Options) *treeHarness {
	t.Helper()
	h := &treeHarness{t: t, st: testdb.Open(t, dialect), bodies: map[string][]invokeBody{}, closed: make(chan string, 100), begun: make(chan string, 100)}
	h.log = eventlog.New(h.st, eventlog.Options{})
	opts.InstanceID = "test"
	if opts.Invoker == nil {
		opts.Invoker = loopbackInvoker(t)
	}
	opts.HeartbeatInterval = time.Hour
	h.m = New(h.log, opts)
	if err := h.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.m.Shutdown(context.Background())
		h.log.Stop()
	})
	return h
}

// agent registers id (linking links, echoing as echo) served by fn.
func (h *treeHarness) agent(id string, links []string, echo string, fn agentFunc) {
	h.t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var in invokeBody
		json.Unmarshal(raw, &in)
		h.mu.Lock()
		h.bodies[id] = append(h.bodies[id], in)
		h.mu.Unlock()
		h.begun <- in.RunID
		w.Header().Set("Content-Type", "text/event-stream")
		out := &sseOut{w: w, rc: http.NewResponseController(w)}
		err := fn(r.Context(), in, out)
		if r.Context().Err() != nil {
			h.closed <- in.RunID
			return
		}
		if err != nil {
			out.send("error", map[string]string{"code": "agent_failed", "message": err.Error()})
		}
	}))
	h.t.Cleanup(srv.Close)
	linked, _ := json.Marshal(links)
	if _, err := h.st.AgentUpsert(context.Background(), &store.AgentUpsertParams{AgentID: id, Name: id, Endpoint: srv.URL,
		LinkedAgents: linked, SubAgentEcho: echo, KeyHash: "hash-" + id, At: time.Now().UnixMilli()}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *treeHarness) start(agentID, content string) *store.Run {
	h.t.Helper()
	s, err := h.m.StartRun(context.Background(), StartParams{UserID: "alice", AgentID: agentID, Message: agent.Message{Role: "user", Content: content}})
	if err != nil {
		h.t.Fatal(err)
	}
	return s.Run
}

// call starts a child of in's run from inside agent caller's handler.
func (h *treeHarness) call(ctx context.Context, caller string, in invokeBody, target, content, key string) (*ChildStarted, error) {
	return h.m.StartChild(ctx, ChildParams{CallerAgentID: caller, ParentRunID: in.RunID, AgentID: target,
		Message: agent.Message{Role: "user", Content: content}, IdempotencyKey: key})
}

// relay waits for a child and returns its result.
func (h *treeHarness) relay(ctx context.Context, c *ChildStarted) (*ChildResult, error) {
	r, err := h.m.WaitEnded(ctx, c.Run)
	if err != nil {
		return nil, err
	}
	return h.m.Result(ctx, r)
}

func (h *treeHarness) waitBegun(n int) []string {
	h.t.Helper()
	var ids []string
	for range n {
		select {
		case id := <-h.begun:
			ids = append(ids, id)
		case <-time.After(20 * time.Second):
			h.t.Fatalf("only %d of %d agents were invoked", len(ids), n)
		}
	}
	return ids
}

func (h *treeHarness) waitClosed(want ...string) {
	h.t.Helper()
	left := map[string]bool{}
	for _, id := range want {
		left[id] = true
	}
	for len(left) > 0 {
		select {
		case id := <-h.closed:
			delete(left, id)
		case <-time.After(20 * time.Second):
			h.t.Fatalf("the agent requests of %v were never closed", left)
		}
	}
}

// sessionEvents lists a session's events.
func (h *treeHarness) sessionEvents(sessionID string) []store.Event {
	h.t.Helper()
	evs, err := h.st.EventsList(context.Background(), &store.EventsListParams{SessionID: sessionID, Limit: 10000})
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// seqOf is the seq of the first event of runID with type typ (0: none).
func seqOf(evs []store.Event, runID, typ string) int64 {
	for _, e := range evs {
		if e.RunID == runID && e.Type == typ {
			return e.Seq
		}
	}
	return 0
}

func codeOf(err error) string {
	var e *respond.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return fmt.Sprint(err)
}

// TestChildRun: a running agent calls a linked agent; the child is a run of
// the same session with parent_run_id and depth, sent only its input, its
// events carry its parent, it is echoed to clients, its transcript rows say
// whose they are, and its caller gets its output. Refusals come in the
// contract's order and codes.
func TestChildRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		type outcome struct {
			first, again *ChildStarted
			res          *ChildResult
			errs         map[string]string
		}
		got := make(chan outcome, 1)
		h.agent("a", []string{"b", "ghost"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			out.send("state", map[string]any{"state": "calling", "detail": map[string]any{}})
			var o outcome
			var err error
			if o.first, err = h.call(ctx, "a", in, "b", "what is 6x7?", "k1"); err != nil {
				return err
			}
			o.errs = map[string]string{}
			o.again, err = h.call(ctx, "a", in, "b", "what is 6x7?", "k1")
			o.errs["retry"] = codeOf(err)
			_, err = h.call(ctx, "a", in, "b", "something else", "k1")
			o.errs["same key, other message"] = codeOf(err)
			_, err = h.call(ctx, "a", in, "c", "hi", "")
			o.errs["not linked"] = codeOf(err)
			_, err = h.call(ctx, "a", in, "ghost", "hi", "")
			o.errs["no such agent"] = codeOf(err)
			_, err = h.call(ctx, "b", in, "b", "hi", "")
			o.errs["another agent's run"] = codeOf(err)
			if o.res, err = h.relay(ctx, o.first); err != nil {
				return err
			}
			got <- o
			out.delta("b says " + o.res.Output)
			return out.done(map[string]int{"total_tokens": 3})
		})
		h.agent("b", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			out.delta("4")
			time.Sleep(150 * time.Millisecond) // past the echo interval: two partials
			out.delta("2")
			return out.done(map[string]int{"total_tokens": 5})
		})
		h.agent("c", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error { return out.done(nil) })

		root := h.start("a", "ask b")
		root = waitEnded(t, h.st, root.RunID)
		if root.Status != store.RunDone {
			t.Fatalf("root ended %s %s", root.Status, root.Error)
		}
		o := <-got
		child := o.first.Run
		for name, want := range map[string]string{
			"retry": "<nil>", "same key, other message": "idempotency_conflict", "not linked": "agent_not_linked",
			"no such agent": "agent_not_found", "another agent's run": "forbidden",
		} {
			if o.errs[name] != want {
				t.Errorf("%s: %s, want %s", name, o.errs[name], want)
			}
		}
		if !o.first.Created || o.again.Created || o.again.Run.RunID != child.RunID || o.again.FirstSeq != o.first.FirstSeq || o.first.FirstSeq == 0 {
			t.Errorf("first %+v, retry %+v: want one child, created once, same first seq", o.first, o.again)
		}
		if o.res.Status != store.RunDone || o.res.Output != "42" || !sameJSON(o.res.Usage, `{"total_tokens":5}`) {
			t.Errorf("result = %+v", o.res)
		}
		child = waitEnded(t, h.st, child.RunID)
		if child.SessionID != root.SessionID || child.ParentRunID != root.RunID || child.RootRunID != root.RunID || child.Depth != 1 || child.UserID != "alice" || child.Status != store.RunDone {
			t.Errorf("child = %+v", child)
		}
		if kids, _ := h.st.RunListChildren(context.Background(), root.RunID); len(kids) != 1 {
			t.Errorf("%d children, want 1", len(kids))
		}
		// The child's agent got its parent, depth and only its input.
		h.mu.Lock()
		bb := h.bodies["b"]
		h.mu.Unlock()
		if len(bb) != 1 || bb[0].ParentRunID != root.RunID || bb[0].Depth != 1 || bb[0].RunID != child.RunID ||
			bb[0].InputMessage.Content != "what is 6x7?" || len(bb[0].Messages) != 1 || bb[0].Messages[0].Content != "what is 6x7?" {
			t.Errorf("b was invoked with %+v", bb)
		}
		if ab := h.bodies["a"]; ab[0].Depth != 0 || ab[0].ParentRunID != "" {
			t.Errorf("root body %+v", ab[0])
		}

		evs := h.sessionEvents(root.SessionID)
		var partial strings.Builder
		partials := 0
		for _, e := range evs {
			if e.RunID == child.RunID && e.ParentRunID != root.RunID {
				t.Errorf("child event %s without its parent", e.Type)
			}
			if e.Type == eventlog.TypeSubAgentPartial {
				var p struct{ Text string }
				json.Unmarshal(e.Payload, &p)
				partial.WriteString(p.Text)
				partials++
			}
		}
		if partial.String() != "42" || partials != 2 {
			t.Errorf("partials: %d, %q; want 2 making 42", partials, partial.String())
		}
		called := seqOf(evs, root.RunID, eventlog.TypeAgentCalledChild)
		if called == 0 || called >= seqOf(evs, child.RunID, eventlog.TypeUserInput) {
			t.Errorf("agent_called_child at %d, child's input at %d", called, seqOf(evs, child.RunID, eventlog.TypeUserInput))
		}
		order := []string{eventlog.TypeUserInput, eventlog.TypeRunStarted, eventlog.TypeAgentInvokeStarted, eventlog.TypeSubAgentCallStart,
			eventlog.TypeAgentStreamDelta, eventlog.TypeSubAgentComplete, eventlog.TypeRunDone}
		for i := 1; i < len(order); i++ {
			if a, b := seqOf(evs, child.RunID, order[i-1]), seqOf(evs, child.RunID, order[i]); a == 0 || b <= a {
				t.Errorf("child %s at %d, %s at %d", order[i-1], a, order[i], b)
			}
		}
		if seqOf(evs, child.RunID, eventlog.TypeRunDone) > seqOf(evs, root.RunID, eventlog.TypeAgentStreamDelta) {
			t.Error("the child ended after its caller relayed its answer")
		}
		for _, e := range evs {
			switch {
			case e.RunID == child.RunID && e.Type == eventlog.TypeSubAgentCallStart:
				var p map[string]any
				json.Unmarshal(e.Payload, &p)
				if p["agent_id"] != "b" || p["input_summary"] != "what is 6x7?" || p["depth"] != float64(1) {
					t.Errorf("sub_agent_call_start %s", e.Payload)
				}
			case e.RunID == child.RunID && e.Type == eventlog.TypeSubAgentComplete:
				var p map[string]any
				json.Unmarshal(e.Payload, &p)
				if p["output"] != "42" || p["duration_ms"] == nil || fmt.Sprint(p["usage"]) != "map[total_tokens:5]" {
					t.Errorf("sub_agent_complete %s", e.Payload)
				}
			case e.RunID == child.RunID && e.Type == eventlog.TypeRunStarted:
				var p map[string]any
				json.Unmarshal(e.Payload, &p)
				if p["parent_run_id"] != root.RunID || p["depth"] != float64(1) || !strings.HasPrefix(fmt.Sprint(p["traceparent"]), "00-") {
					t.Errorf("child run_started %s", e.Payload)
				}
			}
		}

		// Transcript rows say whose they are; a root agent gets root turns.
		msgs, _ := h.st.MessagesList(context.Background(), &store.MessagesListParams{SessionID: root.SessionID, Limit: 100})
		var rows []string
		for _, m := range msgs {
			rows = append(rows, fmt.Sprintf("%s/%t/%s:%s", m.AgentID, m.ParentRunID != "", m.Role, m.Content))
		}
		want := []string{"a/false/user:ask b", "b/true/user:what is 6x7?", "b/true/assistant:42", "a/false/assistant:b says 42"}
		if !slices.Equal(rows, want) {
			t.Errorf("transcript %v\nwant %v", rows, want)
		}
		second, err := h.m.StartRun(context.Background(), StartParams{UserID: "alice", SessionID: root.SessionID, AgentID: "c", Message: agent.Message{Role: "user", Content: "next"}})
		if err != nil {
			t.Fatal(err)
		}
		waitEnded(t, h.st, second.Run.RunID)
		h.mu.Lock()
		cb := h.bodies["c"]
		h.mu.Unlock()
		var sent []string
		for _, m := range cb[len(cb)-1].Messages {
			sent = append(sent, m.Content)
		}
		if !slices.Equal(sent, []string{"ask b", "b says 42", "next"}) {
			t.Errorf("root messages[] = %v, want the root turns only", sent)
		}
		// A call from a run that has ended is refused.
		if _, err := h.call(context.Background(), "a", invokeBody{RunID: root.RunID}, "b", "late", "k9"); codeOf(err) != "run_not_active" {
			t.Errorf("call from an ended run: %v", err)
		}
	})
}

// TestMaxCallDepth: with AGENTPLANE_MAX_CALL_DEPTH 1 a root may call a
// child, the child may not call further.
func TestMaxCallDepth(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{MaxCallDepth: 1})
		refused := make(chan string, 1)
		h.agent("a", []string{"b"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			c, err := h.call(ctx, "a", in, "b", "go", "")
			if err != nil {
				return err
			}
			h.relay(ctx, c)
			return out.done(nil)
		})
		h.agent("b", []string{"c"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			_, err := h.call(ctx, "b", in, "c", "go", "")
			refused <- codeOf(err)
			return out.done(nil)
		})
		h.agent("c", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error { return out.done(nil) })
		root := waitEnded(t, h.st, h.start("a", "go").RunID)
		if code := <-refused; code != "max_depth_exceeded" || root.Status != store.RunDone {
			t.Fatalf("depth 2 call: %s; root %s", code, root.Status)
		}
	})
}

// holdAgent blocks until the platform closes its request.
func holdAgent(ctx context.Context, in invokeBody, out *sseOut) error {
	out.send("state", map[string]any{"state": "holding", "detail": map[string]any{}})
	<-ctx.Done()
	return ctx.Err()
}

// TestCancelCascadesDownTheTree: cancelling the root of A → B → C cancels
// C, then B, then A, by the same actor, in one transaction; every agent's
// request is closed.
func TestCancelCascadesDownTheTree(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		caller := func(self, target string) agentFunc {
			return func(ctx context.Context, in invokeBody, out *sseOut) error {
				c, err := h.call(ctx, self, in, target, "go", "")
				if err != nil {
					return err
				}
				out.send("state", map[string]any{"state": "waiting", "detail": map[string]any{}})
				h.relay(ctx, c)
				// Its child's end may reach it before its own request is
				// closed: only the platform closing the request ends it.
				<-ctx.Done()
				return ctx.Err()
			}
		}
		h.agent("a", []string{"b"}, "", caller("a", "b"))
		h.agent("b", []string{"c"}, "", caller("b", "c"))
		h.agent("c", nil, "", holdAgent)
		root := h.start("a", "go")
		ids := h.waitBegun(3)
		if _, err := h.m.Cancel(context.Background(), CancelParams{RunID: root.RunID, UserID: "alice", Reason: "enough"}); err != nil {
			t.Fatal(err)
		}
		h.waitClosed(ids...)
		evs := h.sessionEvents(root.SessionID)
		var prev int64
		for i, id := range slices.Backward(ids) { // c, b, a
			r, _ := h.st.RunGet(context.Background(), id)
			if r.Status != store.RunCancelled || errorCodeOf(r) != "cancelled" {
				t.Errorf("run %d ended %s %s", i, r.Status, r.Error)
			}
			seq := seqOf(evs, id, eventlog.TypeRunCancelled)
			if seq <= prev {
				t.Errorf("run_cancelled of %s at %d, after %d: want deepest first", id, seq, prev)
			}
			prev = seq
			if id != root.RunID {
				var p map[string]any
				for _, e := range evs {
					if e.RunID == id && e.Type == eventlog.TypeSubAgentError {
						json.Unmarshal(e.Payload, &p)
					}
				}
				if p["code"] != "cancelled" || !strings.Contains(fmt.Sprint(p["message"]), "alice") {
					t.Errorf("sub_agent_error of %s: %v", id, p)
				}
			}
		}
	})
}

func errorCodeOf(r *store.Run) string { return errorCode(r) }

// sameJSON compares JSON values, not their spelling (PostgreSQL's jsonb
// spaces them).
func sameJSON(got json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

// TestParentEndEndsChildren: a run that finishes while a child it started
// still runs ends the child (parent_ended) before its own end, and the
// child's request is closed.
func TestParentEndEndsChildren(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		running := make(chan struct{}, 1)
		h.agent("a", []string{"b"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			if _, err := h.call(ctx, "a", in, "b", "go", ""); err != nil {
				return err
			}
			<-running
			return out.done(nil)
		})
		h.agent("b", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			running <- struct{}{}
			return holdAgent(ctx, in, out)
		})
		root := waitEnded(t, h.st, h.start("a", "go").RunID)
		kids, _ := h.st.RunListChildren(context.Background(), root.RunID)
		if root.Status != store.RunDone || len(kids) != 1 {
			t.Fatalf("root %s with %d children", root.Status, len(kids))
		}
		child := waitEnded(t, h.st, kids[0].RunID)
		if child.Status != store.RunCancelled || errorCode(child) != "parent_ended" {
			t.Fatalf("child ended %s %s", child.Status, child.Error)
		}
		h.waitClosed(child.RunID)
		evs := h.sessionEvents(root.SessionID)
		if c, p := seqOf(evs, child.RunID, eventlog.TypeRunCancelled), seqOf(evs, root.RunID, eventlog.TypeRunDone); c == 0 || c > p {
			t.Fatalf("child ended at %d, parent at %d", c, p)
		}
	})
}

// TestChildFailureIsHandedBack: a child that fails is its caller's to
// handle: the caller gets the error and finishes.
func TestChildFailureIsHandedBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		got := make(chan *ChildResult, 1)
		h.agent("a", []string{"b"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			c, err := h.call(ctx, "a", in, "b", "go", "")
			if err != nil {
				return err
			}
			res, err := h.relay(ctx, c)
			if err != nil {
				return err
			}
			got <- res
			out.delta("b failed, carrying on")
			return out.done(nil)
		})
		h.agent("b", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			return out.send("error", map[string]string{"code": "boom", "message": "b broke"})
		})
		root := waitEnded(t, h.st, h.start("a", "go").RunID)
		res := <-got
		if root.Status != store.RunDone || res.Status != store.RunFailed || !strings.Contains(string(res.Error), `"boom"`) || res.Output != "" {
			t.Fatalf("root %s, child result %+v", root.Status, res)
		}
		var p map[string]any
		for _, e := range h.sessionEvents(root.SessionID) {
			if e.Type == eventlog.TypeSubAgentError {
				json.Unmarshal(e.Payload, &p)
			}
		}
		if p["code"] != "boom" || p["agent_id"] != "b" {
			t.Fatalf("sub_agent_error %v", p)
		}
	})
}

// TestOrphanedTreeFailsDeepestFirst: runs of a process that died are
// failed platform_restarted, the child before its parent (which would
// otherwise cancel it as parent_ended).
func TestOrphanedTreeFailsDeepestFirst(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		sid := ids.New("ses")
		st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: now})
		root, _ := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "dead", StartedAt: now})
		child, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: root.RunID, RootRunID: root.RunID, Depth: 1, Owner: "dead", StartedAt: now + 1})
		if err != nil {
			t.Fatal(err)
		}
		log := eventlog.New(st, eventlog.Options{})
		defer log.Stop()
		m := New(log, Options{InstanceID: "me", Invoker: &agent.Client{}, HeartbeatInterval: time.Hour})
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown(ctx)
		evs, _ := st.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 100})
		var types []string
		for _, e := range evs {
			who := "root"
			if e.RunID == child.RunID {
				who = "child"
			}
			types = append(types, who+":"+e.Type)
		}
		if want := []string{"child:sub_agent_error", "child:run_failed", "root:run_failed"}; !slices.Equal(types, want) {
			t.Fatalf("events %v, want %v", types, want)
		}
		for _, id := range []string{root.RunID, child.RunID} {
			if r, _ := st.RunGet(ctx, id); r.Status != store.RunFailed || errorCode(r) != "platform_restarted" {
				t.Errorf("%s ended %s %s", id, r.Status, r.Error)
			}
		}
	})
}

// TestWaitingOnAChildIsNotIdle: an agent silent while its child runs is
// waiting on the platform, like one waiting for an approval: the idle
// timeout does not cut it.
func TestWaitingOnAChildIsNotIdle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		inv := loopbackInvoker(t)
		// The idle timeout leaves room for the parent's own call to reach
		// the platform on a loaded machine; the child then keeps the parent
		// silent for 2.5 s, well past it.
		inv.FirstByteTimeout, inv.IdleTimeout = 3*time.Second, time.Second
		h := newTreeHarness(t, dialect, Options{Invoker: inv})
		h.agent("a", []string{"b"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			out.send("state", map[string]any{"state": "calling", "detail": map[string]any{}})
			c, err := h.call(ctx, "a", in, "b", "go", "")
			if err != nil {
				return err
			}
			if _, err := h.relay(ctx, c); err != nil { // silent well past the idle timeout
				return err
			}
			return out.done(nil)
		})
		h.agent("b", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			for range 10 {
				out.delta(".")
				time.Sleep(250 * time.Millisecond)
			}
			return out.done(nil)
		})
		if root := waitEnded(t, h.st, h.start("a", "go").RunID); root.Status != store.RunDone {
			t.Fatalf("root ended %s %s", root.Status, root.Error)
		}
	})
}

// TestSubAgentEchoModes: aggregate sends fewer partials than deltas,
// passthrough one per delta, off none; the text is whole in each.
func TestSubAgentEchoModes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		for _, mode := range []string{store.EchoAggregate, store.EchoPassthrough, store.EchoOff} {
			t.Run(mode, func(t *testing.T) {
				h := newTreeHarness(t, dialect, Options{})
				h.agent("a", []string{"b"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
					c, err := h.call(ctx, "a", in, "b", "go", "")
					if err != nil {
						return err
					}
					h.relay(ctx, c)
					return out.done(nil)
				})
				h.agent("b", nil, mode, func(ctx context.Context, in invokeBody, out *sseOut) error {
					for i := range 6 {
						out.delta(fmt.Sprint(i))
						time.Sleep(30 * time.Millisecond)
					}
					return out.done(nil)
				})
				root := waitEnded(t, h.st, h.start("a", "go").RunID)
				var text strings.Builder
				n := 0
				for _, e := range h.sessionEvents(root.SessionID) {
					if e.Type == eventlog.TypeSubAgentPartial {
						var p struct{ Text string }
						json.Unmarshal(e.Payload, &p)
						text.WriteString(p.Text)
						n++
					}
				}
				switch mode {
				case store.EchoAggregate:
					if n < 1 || n >= 6 || text.String() != "012345" {
						t.Fatalf("aggregate: %d partials %q", n, text.String())
					}
				case store.EchoPassthrough:
					if n != 6 || text.String() != "012345" {
						t.Fatalf("passthrough: %d partials %q", n, text.String())
					}
				case store.EchoOff:
					if n != 0 {
						t.Fatalf("off: %d partials", n)
					}
				}
			})
		}
	})
}

// TestTreeAndTotalUsage: the tree of a run nests its descendants, and
// total_usage sums LLM calls (tokens, cost) and tool calls over a subtree
// while usage stays each run's own.
func TestTreeAndTotalUsage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		record := func(in invokeBody, prompt, completion int, cost float64, tools int) {
			evs := []store.EventParams{{SessionID: in.SessionID, RunID: in.RunID, ParentRunID: in.ParentRunID, TS: 1, Type: eventlog.TypeLLMCallDone,
				Payload: json.RawMessage(fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"cached_tokens":1,"reasoning_tokens":2,"estimated_cost":%g}`,
					prompt, completion, prompt+completion, cost))}}
			for range tools {
				evs = append(evs, store.EventParams{SessionID: in.SessionID, RunID: in.RunID, ParentRunID: in.ParentRunID, TS: 1, Type: eventlog.TypeToolCallCreated, Payload: json.RawMessage(`{}`)})
			}
			if _, err := h.log.Append(context.Background(), evs...); err != nil {
				t.Error(err)
			}
		}
		h.agent("a", []string{"b"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			record(in, 10, 5, 0.1, 0)
			for _, msg := range []string{"one", "two"} {
				c, err := h.call(ctx, "a", in, "b", msg, "")
				if err != nil {
					return err
				}
				h.relay(ctx, c)
			}
			return out.done(map[string]int{"total_tokens": 15})
		})
		h.agent("b", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			record(in, 100, 50, 0.2, 1)
			return out.done(map[string]int{"total_tokens": 150})
		})
		root := waitEnded(t, h.st, h.start("a", "go").RunID)
		tree, err := h.m.Tree(context.Background(), root)
		if err != nil {
			t.Fatal(err)
		}
		want := Usage{PromptTokens: 210, CompletionTokens: 105, TotalTokens: 315, CachedTokens: 3, ReasoningTokens: 6, EstimatedCost: 0.5, LLMCalls: 3, ToolCalls: 2}
		if tree.TotalUsage != want {
			t.Errorf("total %+v\nwant  %+v", tree.TotalUsage, want)
		}
		if len(tree.Children) != 2 || tree.Children[0].TotalUsage.TotalTokens != 150 || !sameJSON(tree.Children[0].Usage, `{"total_tokens":150}`) || !sameJSON(tree.Usage, `{"total_tokens":15}`) {
			t.Errorf("tree %+v", tree)
		}
		v, err := h.m.View(context.Background(), root)
		if err != nil || len(v.Children) != 2 || v.Children[0] != tree.Children[0].RunID || v.TotalUsage != want {
			t.Errorf("view %+v, %v", v, err)
		}
		sub, _ := h.m.Tree(context.Background(), waitEnded(t, h.st, tree.Children[1].RunID))
		if sub.TotalUsage.TotalTokens != 150 || len(sub.Children) != 0 {
			t.Errorf("subtree %+v", sub)
		}
	})
}
