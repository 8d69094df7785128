package e2e

// Remote A2A agents (issue 10, DESIGN §12) against the real binary on both
// stores: an a2a-go server in the test registered with protocol "a2a" is
// invoked as a root run and as a call_<agent> child, streaming and not;
// its input-required task is resumed (same remote taskId) by the user's
// answer; a cancel reaches it as tasks/cancel; peers that send garbage or
// hang fail their runs with clear codes; health is its card. The
// @a2a-js/sdk server is in a2a_interop_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// remoteA2A is an a2a-go agent: "weather" asks which city and completes
// the same task with the answer; "slow" streams until cancelled; anything
// else streams "one two three".
type remoteA2A struct {
	*httptest.Server
	mu        sync.Mutex
	continued []string
	cancelled []string
	cancelRun []string    // each tasks/cancel's x-run-id, and whether it had a traceparent
	started   chan string // task ids of slow tasks once they stream
}

func (e *remoteA2A) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text := ec.Message.Parts[0].Text()
		if ec.StoredTask != nil {
			e.mu.Lock()
			e.continued = append(e.continued, string(ec.TaskID))
			e.mu.Unlock()
			yield(a2a.NewArtifactEvent(ec, a2a.NewTextPart("Sunny in "+text)), nil)
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
			return
		}
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		switch text {
		case "weather":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("Which city?"))), nil)
		case "slow":
			yield(a2a.NewArtifactEvent(ec, a2a.NewTextPart("working")), nil)
			e.started <- string(ec.TaskID)
			<-ctx.Done()
		default:
			first := a2a.NewArtifactEvent(ec, a2a.NewTextPart("one "))
			yield(first, nil)
			yield(a2a.NewArtifactUpdateEvent(ec, first.Artifact.ID, a2a.NewTextPart("two ")), nil)
			yield(a2a.NewArtifactUpdateEvent(ec, first.Artifact.ID, a2a.NewTextPart("three")), nil)
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
		}
	}
}

func (e *remoteA2A) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		e.mu.Lock()
		e.cancelled = append(e.cancelled, string(ec.TaskID))
		runID, _ := ec.ServiceParams.Get("x-run-id")
		tp, _ := ec.ServiceParams.Get("traceparent")
		e.cancelRun = append(e.cancelRun, fmt.Sprintf("%s traceparent=%v", strings.Join(runID, ","), len(tp) == 1 && len(tp[0]) == 55))
		e.mu.Unlock()
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

func (e *remoteA2A) seen() (continued, cancelled []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.continued...), append([]string(nil), e.cancelled...)
}

// waitCancelled waits (10 s at most) until the remote has seen tasks/cancel
// for exactly the tasks want, in that order.
func (e *remoteA2A) waitCancelled(t *testing.T, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, cancelled := e.seen()
		if slices.Equal(cancelled, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remote saw cancels %v, want %v", cancelled, want)
		}
	}
}

// startRemoteA2A serves a remoteA2A at /agent, its card saying whether it
// streams.
func startRemoteA2A(t *testing.T, streaming bool) *remoteA2A {
	t.Helper()
	e := &remoteA2A{started: make(chan string, 4)}
	h := a2asrv.NewHandler(e)
	v1, v03 := a2asrv.NewJSONRPCHandler(h), a2av0.NewJSONRPCHandler(h)
	e.Server = httptest.NewUnstartedServer(nil)
	mux := http.NewServeMux()
	mux.Handle("GET /agent/.well-known/agent-card.json", a2asrv.NewAgentCardHandler(a2av0.NewAgentCardProducer(a2asrv.AgentCardProducerFn(func(context.Context) (*a2a.AgentCard, error) {
		url := e.URL + "/agent"
		return &a2a.AgentCard{Name: "Remote weather", Description: "A remote A2A agent", Version: "1",
			SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(url, a2a.TransportProtocolJSONRPC),
				{URL: url, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version}},
			Capabilities: a2a.AgentCapabilities{Streaming: streaming}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
			Skills: []a2a.AgentSkill{{ID: "weather", Name: "weather", Description: "weather", Tags: []string{"weather"}}}}, nil
	}))))
	mux.HandleFunc("POST /agent", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if strings.Contains(string(body), `"method":"message/`) || strings.Contains(string(body), `"method":"tasks/`) {
			v03.ServeHTTP(w, r)
			return
		}
		v1.ServeHTTP(w, r)
	})
	e.Server.Config.Handler = mux
	e.Start()
	t.Cleanup(func() { e.CloseClientConnections(); e.Close() })
	return e
}

// remoteTaskEvent returns the task_id a run recorded from its remote.
func remoteTaskEvent(t *testing.T, s *server, runID string) string {
	t.Helper()
	for _, e := range s.events("/v1/runs/" + runID + "/events") {
		if e["type"] == "a2a_remote_task" {
			return payload(e)["task_id"].(string)
		}
	}
	t.Fatalf("run %s recorded no remote task", runID)
	return ""
}

func TestA2ARemoteAgent(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--health-interval", "200ms", "--agent-first-byte-timeout", "2s", "--agent-idle-timeout", "2s")
		streamer := startRemoteA2A(t, true)
		blocking := startRemoteA2A(t, false)
		for id, endpoint := range map[string]string{"remote": streamer.URL + "/agent", "remote-blocking": blocking.URL + "/agent/.well-known/agent-card.json"} {
			code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": id, "endpoint": endpoint, "protocol": "a2a"})
			ag, _ := body["agent"].(map[string]any)
			if code != 201 || ag["protocol"] != "a2a" || obj(ag, "a2a_card")["name"] != "Remote weather" {
				t.Fatalf("register %s: %d %v", id, code, body)
			}
		}
		// A card that is not one is refused; so is a protocol nobody speaks.
		if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "nocard", "endpoint": newScriptedAgent(t, modeStream, 1).URL, "protocol": "a2a"}); code != 400 && code != 502 {
			t.Errorf("a registration without a card: %d %v", code, body)
		}
		if code, _ := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "x", "endpoint": streamer.URL, "protocol": "smoke-signals"}); code != 400 {
			t.Errorf("unknown protocol: %d", code)
		}

		c := dial(t, s, "alice", "alice-key")
		for _, id := range []string{"remote", "remote-blocking"} {
			c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": id, "message": map[string]any{"role": "user", "content": "go"}})
			msgs := c.untilEnd()
			if text(msgs) != "one two three" || msgs[len(msgs)-1]["type"] != "done" {
				t.Fatalf("%s: %v", id, msgs)
			}
		}

		// Input required keeps the remote task: the answer continues it.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "w", "agent_id": "remote", "message": map[string]any{"role": "user", "content": "weather"}})
		asked := c.untilEnd()
		last := asked[len(asked)-1]
		if last["type"] != "input_required" || last["question"] != "Which city?" {
			t.Fatalf("weather: %v", asked)
		}
		sid := asked[0]["session_id"].(string)
		taskID := remoteTaskEvent(t, s, asked[0]["run_id"].(string))
		c.send(map[string]any{"type": "agent_invoke", "request_id": "a", "session_id": sid, "agent_id": "remote", "message": map[string]any{"role": "user", "content": "Oslo"}})
		answer := c.untilEnd()
		if text(answer) != "Sunny in Oslo" || answer[0]["resumes_run_id"] != asked[0]["run_id"] {
			t.Fatalf("answer: %v", answer)
		}
		if continued, _ := streamer.seen(); fmt.Sprint(continued) != "["+taskID+"]" {
			t.Errorf("the remote continued %v, want [%s]", continued, taskID)
		}
		if remoteTaskEvent(t, s, answer[0]["run_id"].(string)) != taskID {
			t.Error("the answer ran another remote task")
		}
		// Across a kill -9 and a restart the answer still continues the
		// remote task: the new process, which never drove the question's
		// run, reads the task from the log.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "w2", "session_id": sid, "agent_id": "remote", "message": map[string]any{"role": "user", "content": "weather"}})
		asked = c.untilEnd()
		if last := asked[len(asked)-1]; last["type"] != "input_required" {
			t.Fatalf("weather again: %v", asked)
		}
		taskID2 := remoteTaskEvent(t, s, asked[0]["run_id"].(string))
		c.conn.Close()
		s.kill()
		s.restart()
		c = dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "a2", "session_id": sid, "agent_id": "remote", "message": map[string]any{"role": "user", "content": "Bergen"}})
		if answer := c.untilEnd(); text(answer) != "Sunny in Bergen" || answer[0]["resumes_run_id"] != asked[0]["run_id"] {
			t.Fatalf("answer after restart: %v", answer)
		}
		if continued, _ := streamer.seen(); fmt.Sprint(continued) != "["+taskID+" "+taskID2+"]" {
			t.Errorf("the remote continued %v, want [%s %s]", continued, taskID, taskID2)
		}

		// Cancel reaches the remote as tasks/cancel.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "s", "agent_id": "remote", "message": map[string]any{"role": "user", "content": "slow"}})
		started := c.next()
		var slowTask string
		select {
		case slowTask = <-streamer.started:
		case <-time.After(20 * time.Second):
			t.Fatal("the slow task never started")
		}
		// Once its output arrives the run knows the remote task (a cancel
		// before the remote's first event has no task id to cancel).
		for m := c.next(); m["type"] != "delta"; m = c.next() {
		}
		c.send(map[string]any{"type": "cancel_run", "run_id": started["run_id"]})
		if end := c.untilEnd(); end[len(end)-1]["state"] != "CANCELLED" {
			t.Fatalf("cancel: %v", end)
		}
		streamer.waitCancelled(t, slowTask)

		// A run whose process dies while its remote task runs is failed
		// platform_restarted by the restarted process, which sends the
		// tasks/cancel the dead one could not.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "s2", "agent_id": "remote", "message": map[string]any{"role": "user", "content": "slow"}})
		orphan := c.next()
		var orphanTask string
		select {
		case orphanTask = <-streamer.started:
		case <-time.After(20 * time.Second):
			t.Fatal("the second slow task never started")
		}
		for m := c.next(); m["type"] != "delta"; m = c.next() {
		}
		c.conn.Close()
		s.kill()
		s.restart()
		if run := waitRunEnded(t, s, sv(orphan, "run_id")); run["status"] != "FAILED" || sv(obj(run, "error"), "code") != "platform_restarted" {
			t.Fatalf("orphaned run %v", run)
		}
		streamer.waitCancelled(t, slowTask, orphanTask)
		// Both cancels said which run they end, as the run's other requests did.
		streamer.mu.Lock()
		sent := slices.Clone(streamer.cancelRun)
		streamer.mu.Unlock()
		if want := []string{sv(started, "run_id") + " traceparent=true", sv(orphan, "run_id") + " traceparent=true"}; !slices.Equal(sent, want) {
			t.Errorf("the cancels' headers: %q, want %q", sent, want)
		}
		c = dial(t, s, "alice", "alice-key")

		// Health is the card: healthy while it answers, unhealthy once gone.
		waitAgentStatus(t, s, "remote-blocking", "healthy")
		blocking.CloseClientConnections()
		blocking.Close()
		waitAgentStatus(t, s, "remote-blocking", "unhealthy")

		// A child over A2A: the tool form of a linked remote agent.
		tools := startGoToolAgent(t, s, "caller")
		code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "caller", "endpoint": tools.srv.URL, "linked_agents": []string{"remote"}})
		if code != 200 {
			t.Fatalf("link: %d %v", code, body)
		}
		c.invokeSpec("caller", "", map[string]any{"tool": "call_remote", "args": map[string]any{"message": "go"}})
		msgs := c.untilEnd()
		if !strings.Contains(text(msgs), `"output":"one two three"`) {
			t.Fatalf("call_remote: %v", msgs)
		}
		s.checkRaces()
	})
}

func waitAgentStatus(t *testing.T, s *server, agentID, want string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, ag := s.call("GET", "/v1/agents/"+agentID, adminKey, nil); ag["status"] == want {
			return
		}
	}
	t.Fatalf("agent %s never became %s", agentID, want)
}

// TestA2ARemoteBrokenPeers: a remote A2A agent that answers garbage, hangs
// or disconnects fails its run with a clear code.
func TestA2ARemoteBrokenPeers(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--agent-first-byte-timeout", "1s", "--agent-idle-timeout", "1s")
		modes := map[string]string{"garbage": "agent_protocol_error", "hang": "agent_timeout", "disconnect": "agent_disconnected", "status-500": "agent_http_error"}
		for mode, want := range modes {
			var base string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					card := map[string]any{"name": mode, "description": "broken", "version": "1", "capabilities": map[string]any{"streaming": true},
						"supportedInterfaces": []any{map[string]any{"url": base + "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}},
						"defaultInputModes":   []string{"text/plain"}, "defaultOutputModes": []string{"text/plain"}, "skills": []any{}}
					json.NewEncoder(w).Encode(card)
					return
				}
				io.Copy(io.Discard, r.Body)
				switch mode {
				case "garbage":
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, "data: {{{{ not json\n\n")
				case "hang":
					w.Header().Set("Content-Type", "text/event-stream")
					http.NewResponseController(w).Flush()
					<-r.Context().Done()
				case "disconnect":
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, `data: {"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}}`+"\n\n")
					http.NewResponseController(w).Flush()
					conn, _, _ := http.NewResponseController(w).Hijack()
					conn.Close()
				case "status-500":
					http.Error(w, "boom", 500)
				}
			}))
			t.Cleanup(srv.Close)
			base = srv.URL
			if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "broken-" + mode, "endpoint": srv.URL, "protocol": "a2a"}); code != 201 {
				t.Fatalf("register %s: %d %v", mode, code, body)
			}
			c := dial(t, s, "alice", "alice-key")
			c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "broken-" + mode, "message": map[string]any{"role": "user", "content": "go"}})
			msgs := c.untilEnd()
			if end := msgs[len(msgs)-1]; end["type"] != "error" || end["code"] != want {
				t.Errorf("%s: ended %v, want error %s", mode, end, want)
			}
		}
		s.checkRaces()
	})
}
