package e2e

// Input required end to end (issue 10, DESIGN §12), against the real
// binary on both stores: an agent asks back; the question reaches the
// client, survives a reconnect and a kill -9 with restart (it is in the
// log), and the answer resumes the intention. A planner agent calling the
// asking agent through the platform gets the question back in the direct
// form (SSE and JSON) and resumes it with its next call.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// askingAgent asks "Which city?" unless it is answering its own question
// (resumes_run_id set); then it answers with the weather in that city —
// and fails no_question unless its messages hold the question before the
// answer, as a resumed run's do (a root's and a child's alike).
func askingAgent(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			InputMessage struct{ Content string } `json:"input_message"`
			ResumesRunID string                   `json:"resumes_run_id"`
			IntentionID  string                   `json:"intention_id"`
			Messages     []struct {
				Role, Content string
			} `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "text/event-stream")
		if in.IntentionID == "" {
			fmt.Fprint(w, "event: error\ndata: {\"code\":\"no_intention\",\"message\":\"no intention_id\"}\n\n")
			return
		}
		if in.ResumesRunID == "" {
			fmt.Fprint(w, "event: input_required\ndata: {\"question\":\"Which city?\",\"detail\":{\"choices\":[\"Paris\",\"Oslo\"]}}\n\n")
			return
		}
		if n := len(in.Messages); n < 2 || in.Messages[n-2].Role != "assistant" || in.Messages[n-2].Content != "Which city?" || in.Messages[n-1].Content != in.InputMessage.Content {
			fmt.Fprintf(w, "event: error\ndata: {\"code\":\"no_question\",\"message\":\"messages do not end with the question and the answer: %d\"}\n\n", n)
			return
		}
		fmt.Fprintf(w, "event: delta\ndata: {\"text\":\"Sunny in %s\"}\n\nevent: done\ndata: {}\n\n", in.InputMessage.Content)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestInputRequiredAcrossReconnectAndRestart(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		s.register("ask", askingAgent(t).URL)
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "q1", "agent_id": "ask", "message": map[string]any{"role": "user", "content": "weather?"}})
		msgs := c.untilEnd()
		started, last := msgs[0], msgs[len(msgs)-1]
		sid, _ := started["session_id"].(string)
		runID, _ := started["run_id"].(string)
		intention, _ := started["intention_id"].(string)
		if started["type"] != "run_started" || intention == "" || started["resumes_run_id"] != nil {
			t.Fatalf("run_started %v", started)
		}
		if last["type"] != "input_required" || last["question"] != "Which city?" || last["run_id"] != runID || last["seq"] == nil {
			t.Fatalf("last message %v", last)
		}
		c.conn.Close()

		// A reconnecting client finds the question in the log.
		c2 := dial(t, s, "alice", "alice-key")
		c2.send(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
		if again := c2.untilEnd(); again[len(again)-1]["type"] != "input_required" || again[len(again)-1]["question"] != "Which city?" {
			t.Fatalf("replay ended %v", again[len(again)-1])
		}
		c2.conn.Close()

		// kill -9 and restart: nothing was running, the question stands.
		s.kill()
		s.restart()
		code, run := s.call("GET", "/v1/runs/"+runID, "alice-key", nil)
		if code != 200 || run["status"] != "INPUT_REQUIRED" || run["question"] != "Which city?" || run["intention_id"] != intention || run["ended_at"] == nil || run["error"] != nil {
			t.Fatalf("run after restart: %d %v", code, run)
		}
		c3 := dial(t, s, "alice", "alice-key")
		c3.send(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
		if again := c3.untilEnd(); again[len(again)-1]["type"] != "input_required" {
			t.Fatalf("replay after restart ended %v", again[len(again)-1])
		}
		// The answer resumes the intention.
		c3.send(map[string]any{"type": "agent_invoke", "request_id": "a1", "session_id": sid, "agent_id": "ask", "message": map[string]any{"role": "user", "content": "Paris"}})
		answer := c3.untilEnd()
		if answer[0]["resumes_run_id"] != runID || answer[0]["intention_id"] != intention || text(answer) != "Sunny in Paris" || answer[len(answer)-1]["type"] != "done" {
			t.Fatalf("answer %v", answer)
		}
		code, tree := s.call("GET", "/v1/runs/"+answer[0]["run_id"].(string)+"/tree", "alice-key", nil)
		if code != 200 || tree["resumes_run_id"] != runID || tree["intention_id"] != intention {
			t.Fatalf("tree %d %v", code, tree)
		}
		// Transcript rows carry the intention.
		code, body := s.call("GET", "/v1/sessions/"+sid+"/messages", "alice-key", nil)
		ms, _ := body["messages"].([]any)
		if code != 200 || len(ms) != 4 {
			t.Fatalf("messages %d %v", code, body)
		}
		for _, m := range ms {
			if m.(map[string]any)["intention_id"] != intention {
				t.Errorf("message without the intention: %v", m)
			}
		}
		// new_intention asks again instead of answering.
		c3.send(map[string]any{"type": "agent_invoke", "request_id": "q2", "session_id": sid, "agent_id": "ask", "message": map[string]any{"role": "user", "content": "weather?"}})
		q2 := c3.untilEnd()
		c3.send(map[string]any{"type": "agent_invoke", "request_id": "n1", "session_id": sid, "agent_id": "ask", "new_intention": true, "message": map[string]any{"role": "user", "content": "Oslo"}})
		n1 := c3.untilEnd()
		if n1[0]["resumes_run_id"] != nil || n1[0]["intention_id"] == q2[0]["intention_id"] || n1[len(n1)-1]["type"] != "input_required" {
			t.Fatalf("new_intention: %v", n1)
		}
		s.checkRaces()
	})
}

func TestChildInputRequiredDirectForm(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		s.register("ask", askingAgent(t).URL)
		var plannerKey string
		planner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/invoke" {
				return
			}
			var in struct {
				RunID        string                   `json:"run_id"`
				ResumesRunID string                   `json:"resumes_run_id"`
				InputMessage struct{ Content string } `json:"input_message"`
			}
			json.NewDecoder(r.Body).Decode(&in)
			w.Header().Set("Content-Type", "text/event-stream")
			body := strings.NewReader(fmt.Sprintf(`{"message":{"role":"user","content":%q}}`, in.InputMessage.Content))
			req, _ := http.NewRequest("POST", s.URL+"/v1/agents/ask:invoke", body)
			req.Header.Set("Authorization", "Bearer "+plannerKey)
			req.Header.Set("x-run-id", in.RunID)
			if in.ResumesRunID == "" {
				// SSE: the child's input_required, then the stream ends.
				req.Header.Set("Accept", "text/event-stream")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					fmt.Fprintf(w, "event: error\ndata: {\"code\":\"x\",\"message\":%q}\n\n", err.Error())
					return
				}
				defer resp.Body.Close()
				var lastEvent, lastData string
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					line := sc.Text()
					if v, ok := strings.CutPrefix(line, "event: "); ok {
						lastEvent = v
					} else if v, ok := strings.CutPrefix(line, "data: "); ok {
						lastData = v
					}
				}
				var d map[string]any
				json.Unmarshal([]byte(lastData), &d)
				if lastEvent != "input_required" || d["question"] != "Which city?" {
					fmt.Fprintf(w, "event: error\ndata: {\"code\":\"bad_child\",\"message\":%q}\n\n", lastEvent+" "+lastData)
					return
				}
				fmt.Fprintf(w, "event: input_required\ndata: {\"question\":%q}\n\n", d["question"])
				return
			}
			// JSON: the resumed child's answer.
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var res map[string]any
			json.Unmarshal(raw, &res)
			if res["status"] != "DONE" {
				fmt.Fprintf(w, "event: error\ndata: {\"code\":\"bad_child\",\"message\":%q}\n\n", raw)
				return
			}
			fmt.Fprintf(w, "event: delta\ndata: {\"text\":%q}\n\nevent: done\ndata: {}\n\n", "planner: "+res["output"].(string))
		}))
		t.Cleanup(planner.Close)
		code, reg := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "planner", "endpoint": planner.URL, "linked_agents": []string{"ask"}})
		if code != 201 {
			t.Fatalf("register planner %d %v", code, reg)
		}
		plannerKey = reg["agent_api_key"].(string)

		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "q1", "agent_id": "planner", "message": map[string]any{"role": "user", "content": "weather?"}})
		first := c.untilEnd()
		sid := first[0]["session_id"].(string)
		var complete map[string]any
		for _, m := range first {
			if m["type"] == "sub_agent_complete" {
				complete = m
			}
			if m["type"] == "input_required" && m["parent_run_id"] != nil {
				t.Errorf("a child's input_required reached the client: %v", m)
			}
		}
		if first[len(first)-1]["type"] != "input_required" || complete == nil || complete["status"] != "input_required" || complete["question"] != "Which city?" {
			t.Fatalf("first turn %v", first)
		}
		childRun := complete["run_id"].(string)
		c.send(map[string]any{"type": "agent_invoke", "request_id": "a1", "session_id": sid, "agent_id": "planner", "message": map[string]any{"role": "user", "content": "Oslo"}})
		second := c.untilEnd()
		if text(second) != "planner: Sunny in Oslo" {
			t.Fatalf("second turn %v", second)
		}
		// The direct JSON form of an asking child.
		code, run := s.call("GET", "/v1/runs/"+childRun, adminKey, nil)
		if code != 200 || run["status"] != "INPUT_REQUIRED" || run["parent_run_id"] == nil {
			t.Fatalf("child %v", run)
		}
		s.checkRaces()
	})
}

// TestInputRequiredPythonSDK: a real Python SDK agent ends its turn with
// `yield agentplane.InputRequired(...)`; nothing it yields after reaches
// the log; the answer reaches it with resumes_run_id and the intention.
func TestInputRequiredPythonSDK(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		cmd := exec.Command("env", "PYTHONPATH="+filepath.Join(repoRoot, "sdk", "python"), "python3", "-u",
			filepath.Join(repoRoot, "internal", "e2e", "testdata", "ask_agent.py"), "--agent-id", "pyask")
		startAgentProcess(t, s, cmd, "pyask")
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "q", "agent_id": "pyask", "message": map[string]any{"role": "user", "content": "weather?"}})
		asked := c.untilEnd()
		last := asked[len(asked)-1]
		intention := sv(asked[0], "intention_id")
		if last["type"] != "input_required" || last["question"] != "Which city?" || obj(last, "detail")["intention_id"] != intention || text(asked) != "Let me check. " {
			t.Fatalf("asked: %v", asked)
		}
		for _, e := range s.events("/v1/runs/" + sv(asked[0], "run_id") + "/events") {
			if strings.Contains(fmt.Sprint(e["payload"]), "never sent") {
				t.Errorf("an event after input_required was recorded: %v", e)
			}
		}
		c.send(map[string]any{"type": "agent_invoke", "request_id": "a", "session_id": asked[0]["session_id"], "agent_id": "pyask", "message": map[string]any{"role": "user", "content": "Oslo"}})
		answer := c.untilEnd()
		want := "Sunny in Oslo (intention " + intention + ", answering " + sv(asked[0], "run_id") + ")"
		if text(answer) != want {
			t.Fatalf("answer %q, want %q", text(answer), want)
		}
		s.checkRaces()
	})
}

// A run that asked the user is ended (GET /v1/runs?status=ended lists it,
// status=active does not), and a message its agent appends to the
// transcript carries the run's intention_id, as the platform's own rows do.
func TestAskedRunIsEndedAndAgentMessagesCarryTheIntention(t *testing.T) {
	s := startServer(t, testdb.DSN(t, "sqlite"))
	var h agentplane.AgentHandler
	srv := httptest.NewServer(&h)
	t.Cleanup(srv.Close)
	h.Platform = agentplane.NewClient(s.URL, s.register("noting", srv.URL))
	h.Handler = func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		if _, err := req.Client().AppendMessage(ctx, req.SessionID, agentplane.Message{Role: "assistant", Content: "a note"}); err != nil {
			return err
		}
		return &agentplane.InputRequiredError{Question: "Which city?"}
	}
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "noting", "message": map[string]any{"role": "user", "content": "weather"}})
	msgs := c.untilEnd()
	if last := msgs[len(msgs)-1]; last["type"] != "input_required" {
		t.Fatalf("run ended %v", last)
	}
	runID, sid, intention := sv(msgs[0], "run_id"), sv(msgs[0], "session_id"), sv(msgs[0], "intention_id")
	for status, want := range map[string]int{"ended": 1, "active": 0, "INPUT_REQUIRED": 1} {
		code, body := s.call("GET", "/v1/runs?session_id="+sid+"&status="+status, "alice-key", nil)
		if runs, _ := body["runs"].([]any); code != 200 || len(runs) != want {
			t.Errorf("runs with status=%s: %d %v, want %d", status, code, body, want)
		}
	}
	code, body := s.call("GET", "/v1/sessions/"+sid+"/messages", "alice-key", nil)
	found := false
	for _, m := range body["messages"].([]any) {
		row := m.(map[string]any)
		if row["content"] == "a note" {
			found = true
			if row["intention_id"] != intention || row["run_id"] != runID || row["agent_id"] != "noting" {
				t.Errorf("the agent's message %v, want intention %s of run %s", row, intention, runID)
			}
		}
	}
	if code != 200 || !found {
		t.Fatalf("messages %d %v", code, body)
	}
}
