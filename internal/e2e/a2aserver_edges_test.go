package e2e

// Edges of the A2A server (DESIGN §12) against the real binary on both
// stores, with a2a-go v2's client.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// gatedAgent streams one delta, then holds each run until release is
// called, then says done: the test decides when a run ends.
type gatedAgent struct {
	*httptest.Server
	arrived chan struct{}
	gate    chan struct{}
}

func newGatedAgent(t *testing.T) *gatedAgent {
	t.Helper()
	a := &gatedAgent{arrived: make(chan struct{}, 1), gate: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: delta\ndata: {\"text\":\"first \"}\n\n")
		http.NewResponseController(w).Flush()
		a.arrived <- struct{}{}
		select {
		case <-a.gate:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "event: delta\ndata: {\"text\":\"last\"}\n\nevent: done\ndata: {}\n\n")
	})
	a.Server = httptest.NewServer(mux)
	t.Cleanup(func() { a.CloseClientConnections(); a.Close() })
	return a
}

// TestA2AResubscribeAsTheRunEnds: a resubscription that reads the task
// while its run is still running, as the run ends, must still end with the
// run's final status. It read the task's runs, then the session's end, and
// followed from that end: a run ending between the two reads had its end
// before the point followed from, while the snapshot still said working —
// the stream then waited (keep-alives only) for an end already past.
func TestA2AResubscribeAsTheRunEnds(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newGatedAgent(t)
		registerA2A(t, s, "gated", ag.URL, nil)
		c, _ := a2aDial(t, s, "gated", "alice-key", false)
		ctx := ctxTimeout(t, 4*time.Minute)
		var resubs, hung atomic.Int64
		for round := 0; round < 25 && hung.Load() == 0 && !t.Failed(); round++ {
			res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("go")),
				Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
			if err != nil {
				t.Fatal(err)
			}
			taskID := res.(*a2a.Task).ID
			select {
			case <-ag.arrived:
			case <-ctx.Done():
				t.Fatal("the agent was not invoked")
			}
			// Resubscriptions every few hundred µs around the run's end,
			// until one reads the task completed.
			var wg sync.WaitGroup
			var ended atomic.Bool
			once := sync.Once{}
			for i := 0; !ended.Load() && i < 2000; i++ {
				if i == 10 {
					once.Do(func() { ag.gate <- struct{}{} })
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					resubs.Add(1)
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					var first, last a2a.TaskState
					for ev, err := range c.SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: taskID}) {
						if err != nil {
							if rctx.Err() != nil {
								break
							}
							t.Errorf("resubscribe: %v", err)
							return
						}
						switch e := ev.(type) {
						case *a2a.Task:
							first, last = e.Status.State, e.Status.State
						case *a2a.TaskStatusUpdateEvent:
							last = e.Status.State
						}
					}
					if first == a2a.TaskStateCompleted {
						ended.Store(true)
					}
					if last != a2a.TaskStateCompleted {
						hung.Add(1)
						t.Errorf("a resubscription read the task %s, then ended as %q (its run completed): no final status", first, last)
					}
				}()
				time.Sleep(300 * time.Microsecond)
			}
			once.Do(func() { ag.gate <- struct{}{} })
			wg.Wait()
		}
		t.Logf("%d resubscriptions", resubs.Load())
		s.checkRaces()
	})
}

// TestA2AServerEdges: the streaming answer to a question keeps the task and
// its history; non-ASCII text round-trips; resubscribing to an ended or
// asking task answers its snapshot and ends; two cancels at once: one
// cancels, the other is TASK_NOT_CANCELABLE.
func TestA2AServerEdges(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		registerA2A(t, s, "ask", askingAgent(t).URL, nil)
		registerA2A(t, s, "slow", newScriptedAgent(t, modeStreamForever, 0).URL, nil)
		ctx := ctxTimeout(t, 90*time.Second)
		c, _ := a2aDial(t, s, "ask", "alice-key", false)
		city := "Zürich — 東京 🌧"
		st := collectStream(t, c.SendStreamingMessage(ctx, userMsg("météo ? "+city)), nil)
		if st.status == nil || st.status.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("ask: %v", st.kinds)
		}
		// Resubscribing to the asking task: its snapshot, then the end.
		var kinds []string
		for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: st.task.ID}) {
			if err != nil {
				t.Fatalf("resubscribe to an asking task: %v", err)
			}
			if tk, ok := ev.(*a2a.Task); ok {
				kinds = append(kinds, string(tk.Status.State))
			} else {
				kinds = append(kinds, fmt.Sprintf("%T", ev))
			}
		}
		if len(kinds) != 1 || kinds[0] != string(a2a.TaskStateInputRequired) {
			t.Errorf("resubscribe to an asking task: %v", kinds)
		}
		ans := collectStream(t, c.SendStreamingMessage(ctx, answerMsg(st.task, a2a.NewTextPart(city))), nil)
		if ans.task == nil || ans.task.ID != st.task.ID || ans.status == nil || ans.status.Status.State != a2a.TaskStateCompleted || ans.text != "Sunny in "+city {
			t.Fatalf("streamed answer: %v %q %+v", ans.kinds, ans.text, ans.task)
		}
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: st.task.ID})
		if err != nil {
			t.Fatal(err)
		}
		var hist []string
		for _, m := range got.History {
			hist = append(hist, string(m.Role)+":"+msgText(m))
		}
		if fmt.Sprint(hist) != fmt.Sprint([]string{"ROLE_USER:météo ? " + city, "ROLE_AGENT:Which city?", "ROLE_USER:" + city}) || got.Status.State != a2a.TaskStateCompleted || artifactText(got) != "Sunny in "+city {
			t.Errorf("get after the streamed answer: %v %s %q", hist, got.Status.State, artifactText(got))
		}
		// The first snapshot of the answer's stream: the history so far.
		if ans.task != nil && len(ans.task.History) != 3 {
			t.Errorf("the answer's stream's task has %d messages of history, want 3", len(ans.task.History))
		}
		// Resubscribing to the completed task: its snapshot, and the end.
		kinds = nil
		for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: st.task.ID}) {
			if err != nil {
				t.Fatalf("resubscribe to a completed task: %v", err)
			}
			if tk, ok := ev.(*a2a.Task); ok {
				kinds = append(kinds, string(tk.Status.State)+":"+artifactText(tk))
			}
		}
		if len(kinds) != 1 || kinds[0] != string(a2a.TaskStateCompleted)+":Sunny in "+city {
			t.Errorf("resubscribe to a completed task: %v", kinds)
		}
		// Two cancels at once.
		sc, _ := a2aDial(t, s, "slow", "alice-key", false)
		res, err := sc.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("go")), Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			t.Fatal(err)
		}
		id := res.(*a2a.Task).ID
		time.Sleep(200 * time.Millisecond)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				tk, err := sc.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id})
				if err == nil && tk.Status.State != a2a.TaskStateCanceled {
					err = fmt.Errorf("cancel answered %s", tk.Status.State)
				}
				errs <- err
			}()
		}
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) {
			t.Errorf("two cancels at once: %v, %v; want one to cancel, the other refused", e1, e2)
		} else if e := errors.Join(e1, e2); !errors.Is(e, a2a.ErrTaskNotCancelable) {
			t.Errorf("the second cancel: %v, want TASK_NOT_CANCELABLE", e)
		}
		s.checkRaces()
	})
}
