package e2e

// The demo's input required and A2A parts (issue 10), on the real binary
// with `serve --demo`, both stores: the demo agent asks "Which city?" when
// the weather is wanted without one, and the answer resumes it; the
// planner's call of the remote A2A currency converter asks back through
// the planner, and the answer continues the same remote task; the demo
// agent is an A2A agent too, its question answered on the same A2A task.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

func TestDemoInputRequiredAndA2A(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = strings.TrimSuffix(dsn, ".db") + "-demo.db"
		}
		s := startDemoOn(t, dsn, nil)
		out := s.output()
		for _, line := range []string{`demo A2A agent "currency"`, "/a2a/demo/.well-known/agent-card.json"} {
			if !strings.Contains(out, line) {
				t.Errorf("the startup output lacks %q:\n%s", line, out)
			}
		}
		code, cur := s.call("GET", "/v1/agents/currency", adminKey, nil)
		if code != http.StatusOK || cur["protocol"] != "a2a" || obj(cur, "a2a_card")["name"] != "Currency converter" {
			t.Fatalf("currency agent: %d %v", code, cur)
		}

		// The demo agent asks which city, and the answer resumes it.
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "q", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "What's the weather?"}})
		asked := c.untilEnd()
		if last := asked[len(asked)-1]; last["type"] != "input_required" || last["question"] != "Which city?" {
			t.Fatalf("the demo agent ended %v", last)
		}
		sid := sv(asked[0], "session_id")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "a", "session_id": sid, "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Paris"}})
		answer := c.untilEnd()
		if answer[len(answer)-1]["type"] != "done" || answer[0]["resumes_run_id"] != asked[0]["run_id"] || !strings.Contains(text(answer), "Paris") {
			t.Fatalf("the answer: %v", answer)
		}

		// The planner hands currency to the remote A2A agent, which asks
		// back; the planner passes the question on; the answer continues
		// the same remote task.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "p", "agent_id": "planner", "message": map[string]any{"role": "user", "content": "Convert currency for the trip"}})
		planned := c.untilEnd()
		last := planned[len(planned)-1]
		if last["type"] != "input_required" || !strings.HasPrefix(sv(last, "question"), "Which amount and currencies?") {
			t.Fatalf("the planner ended %v", planned)
		}
		var child string
		for _, m := range planned {
			if m["type"] == "sub_agent_complete" && m["status"] == "input_required" && m["agent_id"] == "currency" {
				child = sv(m, "run_id")
			}
		}
		if child == "" {
			t.Fatalf("no sub_agent_complete asking back from currency: %v", planned)
		}
		firstTask := remoteTaskEvent(t, s, child)
		c.send(map[string]any{"type": "agent_invoke", "request_id": "p2", "session_id": sv(planned[0], "session_id"), "agent_id": "planner",
			"message": map[string]any{"role": "user", "content": "100 EUR to USD"}})
		done := c.untilEnd()
		if done[len(done)-1]["type"] != "done" || !strings.Contains(text(done), "108.00 USD") {
			t.Fatalf("the planner's answer %v", done)
		}
		var child2 string
		for _, m := range done {
			if m["type"] == "sub_agent_complete" && m["agent_id"] == "currency" {
				child2 = sv(m, "run_id")
			}
		}
		if child2 == "" || remoteTaskEvent(t, s, child2) != firstTask {
			t.Fatalf("the answer did not continue the remote task %s (child %s)", firstTask, child2)
		}
		code, run := s.call("GET", "/v1/runs/"+child2, adminKey, nil)
		if code != 200 || run["resumes_run_id"] != child {
			t.Errorf("the second currency run %v does not resume %s", run, child)
		}

		// The demo agent over A2A: the same question on an A2A task.
		ac, _ := a2aDial(t, s, "demo", "alice-key", false)
		ctx := ctxTimeout(t, 60*time.Second)
		st := collectStream(t, ac.SendStreamingMessage(ctx, userMsg("What's the weather?")), nil)
		if st.status == nil || st.status.Status.State != a2a.TaskStateInputRequired || msgText(st.status.Status.Message) != "Which city?" {
			t.Fatalf("A2A ask: %v", st.kinds)
		}
		res, err := ac.SendMessage(ctx, answerMsg(st.task, a2a.NewTextPart("Oslo")))
		if err != nil {
			t.Fatal(err)
		}
		if task := res.(*a2a.Task); task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "Oslo") {
			t.Fatalf("A2A answer %+v %q", task.Status, artifactText(task))
		}
		s.checkRaces()
	})
}
