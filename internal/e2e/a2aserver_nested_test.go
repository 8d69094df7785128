package e2e

// The A2A server's resubscription to a task whose run waits on a tree of
// agents (DESIGN §11, §12) against the real binary on both stores, with
// a2a-go v2's client and Go SDK agents that call each other.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// nestedAgents: nroot calls nchild (call_nchild), which calls ngrand
// (call_ngrand); ngrand says it was invoked (its run id on started), waits
// for go, then calls the transfer tool, which needs an approval.
type nestedAgents struct {
	started chan string
	goOn    chan struct{}
}

func startNestedAgents(t *testing.T, s *server) *nestedAgents {
	t.Helper()
	na := &nestedAgents{started: make(chan string, 4), goOn: make(chan struct{})}
	serve := func(agentID string, register func(url string) string, handle agentplane.HandlerFunc) {
		var h atomic.Pointer[agentplane.AgentHandler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a := h.Load(); a != nil {
				a.ServeHTTP(w, r)
				return
			}
			w.WriteHeader(http.StatusOK) // a health probe before the key is known
		}))
		t.Cleanup(func() {
			srv.CloseClientConnections()
			srv.Close()
		})
		key := register(srv.URL)
		h.Store(&agentplane.AgentHandler{Handler: handle, Platform: agentplane.NewClient(s.URL, key)})
	}
	// call invokes tool with args and streams its output (or error:…).
	call := func(ctx context.Context, req *agentplane.Request, st agentplane.Stream, tool string, args map[string]any) error {
		res, err := req.Client().Tools().Invoke(ctx, tool, args)
		if err != nil {
			return st.Delta("error:" + err.Error() + "\n")
		}
		var out struct {
			Output string `json:"output"`
		}
		if json.Unmarshal(res, &out) == nil && out.Output != "" {
			return st.Delta(out.Output)
		}
		return st.Delta(string(res) + "\n")
	}
	serve("ngrand", func(url string) string { return s.register("ngrand", url) },
		func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
			if err := st.State("waiting", nil); err != nil {
				return err
			}
			na.started <- req.RunID
			select {
			case <-na.goOn:
			case <-ctx.Done():
				return ctx.Err()
			}
			return call(ctx, req, st, "transfer", map[string]any{"amount": 7, "to": "bob"})
		})
	serve("nchild", func(url string) string { return s.register("nchild", url, "ngrand") },
		func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
			if err := st.State("calling", nil); err != nil {
				return err
			}
			return call(ctx, req, st, "call_ngrand", map[string]any{"message": "transfer"})
		})
	serve("nroot", func(url string) string {
		return registerA2A(t, s, "nroot", url, map[string]any{"linked_agents": []string{"nchild"}})
	}, func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		if err := st.State("calling", nil); err != nil {
			return err
		}
		return call(ctx, req, st, "call_nchild", map[string]any{"message": "transfer"})
	})
	t.Cleanup(func() {
		select {
		case <-na.goOn:
		default:
			close(na.goOn)
		}
	})
	return na
}

// TestA2AResubscribeGrandchildApproval: a task's root run calls a child,
// which calls a grandchild; a client resubscribes while the grandchild runs
// (the child, waiting on it, says nothing), then the grandchild asks for an
// approval. The resubscribed stream says input-required with the approval,
// as tasks/get does, and answering it completes the task.
func TestA2AResubscribeGrandchildApproval(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "transfer", transferTool(te.URL+"/ok", "fail_run", alwaysApproval))
		na := startNestedAgents(t, s)
		c, _ := a2aDial(t, s, "nroot", "alice-key", false)
		ctx := ctxTimeout(t, 60*time.Second)

		res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("transfer")),
			Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			t.Fatal(err)
		}
		task := res.(*a2a.Task)
		var grandRun string
		select {
		case grandRun = <-na.started:
		case <-ctx.Done():
			t.Fatal("the grandchild was not invoked")
		}

		// Resubscribe while the grandchild waits: the snapshot says working.
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		type item struct {
			ev  a2a.Event
			err error
		}
		evs := make(chan item, 64)
		go func() {
			defer close(evs)
			for ev, err := range c.SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
				evs <- item{ev, err}
				if err != nil {
					return
				}
			}
		}()
		select {
		case it := <-evs:
			if it.err != nil {
				t.Fatalf("resubscribe: %v", it.err)
			}
			if snap, ok := it.ev.(*a2a.Task); !ok || snap.Status.State != a2a.TaskStateWorking {
				t.Fatalf("resubscribe's first event: %#v", it.ev)
			}
		case <-rctx.Done():
			t.Fatal("no snapshot from the resubscription")
		}

		// The grandchild asks for the approval now.
		close(na.goOn)
		var d map[string]any
		var last a2a.TaskState
	read:
		for {
			select {
			case it, ok := <-evs:
				if !ok {
					break read
				}
				if it.err != nil {
					if rctx.Err() == nil {
						t.Fatalf("resubscribed stream: %v", it.err)
					}
					break read
				}
				if e, ok := it.ev.(*a2a.TaskStatusUpdateEvent); ok {
					last = e.Status.State
					if last == a2a.TaskStateInputRequired {
						d = dataOf(e.Status.Message)
					}
				}
			case <-rctx.Done():
				break read
			}
		}
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if last != a2a.TaskStateInputRequired || d["kind"] != "approval_required" || d["tool_name"] != "transfer" || d["approval_id"] == nil {
			t.Fatalf("the resubscribed stream ended as %q %v (tasks/get says %s %v); the grandchild %s asked for an approval",
				last, d, got.Status.State, dataOf(got.Status.Message), grandRun)
		}
		if got.Status.State != a2a.TaskStateInputRequired || dataOf(got.Status.Message)["approval_id"] != d["approval_id"] {
			t.Errorf("tasks/get: %s %v", got.Status.State, dataOf(got.Status.Message))
		}

		// Approving it completes the task.
		ans := collectStream(t, c.SendStreamingMessage(ctx, answerMsg(got, a2a.NewDataPart(map[string]any{"approval_id": d["approval_id"], "decision": "approve"}))), nil)
		if ans.status == nil || ans.status.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("after the approval: %v %q", ans.kinds, ans.text)
		}
		s.checkRaces()
	})
}
