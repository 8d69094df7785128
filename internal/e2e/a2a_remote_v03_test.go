package e2e

// A remote A2A agent served by the released a2a-go v0.3 library (not the
// v2 module's compat binding, which writes errors the v1.0 way): when it
// refuses or fails a request, the run — and a caller of it as a
// call_<agent> child — ends with the remote's own reason and message, not
// with a decode error (v0.3 sends a JSON-RPC error's data as an object,
// a2a-go v2's v0.3 client reads an array).

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2asrv03 "github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
)

// v03Executor: "crash" fails the executor with a plain error (a2a-go v0.3
// answers internal error, data {error: …}); "weather" asks which city
// and completes the same task with the answer; anything else completes.
type v03Executor struct{}

func (v03Executor) Execute(ctx context.Context, rc *a2asrv03.RequestContext, q eventqueue.Queue) error {
	text := ""
	if p, ok := rc.Message.Parts[0].(a2a03.TextPart); ok {
		text = p.Text
	}
	final := func(state a2a03.TaskState, answer string) error {
		ev := a2a03.NewStatusUpdateEvent(rc, state, a2a03.NewMessageForTask(a2a03.MessageRoleAgent, rc, a2a03.TextPart{Text: answer}))
		ev.Final = true
		return q.Write(ctx, ev)
	}
	if rc.StoredTask != nil {
		return final(a2a03.TaskStateCompleted, "Sunny in "+text)
	}
	if text == "crash" {
		return errors.New("quota exhausted for today")
	}
	if err := q.Write(ctx, a2a03.NewSubmittedTask(rc, rc.Message)); err != nil {
		return err
	}
	if text == "weather" {
		return final(a2a03.TaskStateInputRequired, "Which city?")
	}
	return final(a2a03.TaskStateCompleted, "ok")
}

func (v03Executor) Cancel(ctx context.Context, rc *a2asrv03.RequestContext, q eventqueue.Queue) error {
	ev := a2a03.NewStatusUpdateEvent(rc, a2a03.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// v03A2A serves v03Executor with a v0.3 card (url, preferredTransport).
type v03A2A struct {
	*httptest.Server
	rpc atomic.Pointer[http.Handler]
}

// forget replaces the server's handler, and so its in-memory tasks: as a
// remote that restarted.
func (r *v03A2A) forget() {
	h := a2asrv03.NewJSONRPCHandler(a2asrv03.NewHandler(v03Executor{}))
	r.rpc.Store(&h)
}

func startV03A2A(t *testing.T, streaming bool) *v03A2A {
	t.Helper()
	r := &v03A2A{Server: httptest.NewUnstartedServer(nil)}
	r.forget()
	mux := http.NewServeMux()
	mux.Handle("GET /.well-known/agent-card.json", a2asrv03.NewAgentCardHandler(a2asrv03.AgentCardProducerFn(func(context.Context) (*a2a03.AgentCard, error) {
		return &a2a03.AgentCard{Name: "Old weather", Description: "an A2A v0.3 agent", Version: "1", URL: r.URL + "/rpc",
			PreferredTransport: a2a03.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0",
			Capabilities: a2a03.AgentCapabilities{Streaming: streaming}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
			Skills: []a2a03.AgentSkill{{ID: "weather", Name: "weather", Description: "weather", Tags: []string{"weather"}}}}, nil
	})))
	mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, req *http.Request) { (*r.rpc.Load()).ServeHTTP(w, req) })
	r.Config.Handler = mux
	r.Start()
	t.Cleanup(func() { r.CloseClientConnections(); r.Close() })
	return r
}

func TestA2ARemoteV03Errors(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--agent-first-byte-timeout", "5s", "--agent-idle-timeout", "5s")
		remotes := map[string]*v03A2A{"old": startV03A2A(t, true), "old-blocking": startV03A2A(t, false)}
		for id, r := range remotes {
			if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": id, "endpoint": r.URL, "protocol": "a2a"}); code != 201 {
				t.Fatalf("register %s: %d %v", id, code, body)
			}
		}
		c := dial(t, s, "alice", "alice-key")
		wantFailed := func(what string, msgs []map[string]any, want string) {
			t.Helper()
			end := msgs[len(msgs)-1]
			if end["type"] != "error" || end["code"] != "agent_error" || !strings.Contains(sv(end, "message"), want) {
				t.Errorf("%s: ended %v, want agent_error with %q", what, end, want)
				return
			}
			run := waitRunEnded(t, s, sv(msgs[0], "run_id"))
			if run["status"] != "FAILED" || sv(obj(run, "error"), "code") != "agent_error" || !strings.Contains(sv(obj(run, "error"), "message"), want) {
				t.Errorf("%s: run %v %v, want FAILED agent_error with %q", what, run["status"], run["error"], want)
			}
		}
		for id, r := range remotes {
			// It works, then its executor fails: the remote's message.
			c.send(map[string]any{"type": "agent_invoke", "request_id": "ok", "agent_id": id, "message": map[string]any{"role": "user", "content": "hi"}})
			if msgs := c.untilEnd(); text(msgs) != "ok" || msgs[len(msgs)-1]["type"] != "done" {
				t.Fatalf("%s: %v", id, msgs)
			}
			c.send(map[string]any{"type": "agent_invoke", "request_id": "crash", "agent_id": id, "message": map[string]any{"role": "user", "content": "crash"}})
			wantFailed(id+" crash", c.untilEnd(), "INTERNAL_ERROR: internal error: quota exhausted for today")

			// A question, then the remote restarts and forgets its task:
			// the answer is refused as A2A's task not found.
			c.send(map[string]any{"type": "agent_invoke", "request_id": "w", "agent_id": id, "message": map[string]any{"role": "user", "content": "weather"}})
			asked := c.untilEnd()
			if last := asked[len(asked)-1]; last["type"] != "input_required" || last["question"] != "Which city?" {
				t.Fatalf("%s weather: %v", id, asked)
			}
			r.forget()
			c.send(map[string]any{"type": "agent_invoke", "request_id": "a", "session_id": asked[0]["session_id"], "agent_id": id, "message": map[string]any{"role": "user", "content": "Oslo"}})
			wantFailed(id+" answer to a forgotten task", c.untilEnd(), "TASK_NOT_FOUND: task not found")
		}

		// A caller of it through call_old: the child's failure comes back
		// as sub_agent_failed, and the client sees the remote's message.
		tools := startGoToolAgent(t, s, "caller")
		if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "caller", "endpoint": tools.srv.URL, "linked_agents": []string{"old"}}); code != 200 {
			t.Fatalf("link: %d %v", code, body)
		}
		c.invokeSpec("caller", "", map[string]any{"tool": "call_old", "args": map[string]any{"message": "crash"}})
		msgs := c.untilEnd()
		if got := deltaLines(msgs); len(got) != 1 || got[0] != "error:sub_agent_failed" || msgs[len(msgs)-1]["type"] != "done" {
			t.Fatalf("call_old: %q %v", got, msgs)
		}
		var subErr map[string]any
		for _, m := range msgs {
			if m["type"] == "sub_agent_error" {
				subErr = m
			}
		}
		if sv(subErr, "agent_id") != "old" || sv(subErr, "code") != "agent_error" || !strings.Contains(sv(subErr, "message"), "quota exhausted for today") {
			t.Errorf("sub_agent_error %v, want agent_error with the remote's message", subErr)
		}
		s.checkRaces()
	})
}
