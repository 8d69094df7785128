package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An agent's state event may carry any name, the platform's own included;
// clients tell them apart by source: "agent" for what the agent sent,
// "platform" for the run's own states. A client that reads source never
// takes an agent's "CANCELLED" for the run's end.
func TestAgentStatesCannotPassForPlatformStates(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	names := []string{"CANCELLED", "DONE", "FAILED", "cancelled", "PAUSED_WAITING_APPROVAL", "RUNNING", "QUEUED", "INPUT_REQUIRED"}
	ag := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, n := range names {
			fmt.Fprintf(w, "event: state\ndata: {\"state\":%q,\"detail\":{\"tool_call_id\":\"tc_x\",\"outcome\":\"CANCELLED\"}}\n\n", n)
			fmt.Fprintf(w, "event: delta\ndata: {\"text\":\"after %s \"}\n\n", n)
		}
		fmt.Fprint(w, "event: done\ndata: {}\n\n")
	}))
	t.Cleanup(ag.Close)
	s.register("stateful", ag.URL)
	forever := newScriptedAgent(t, modeStreamForever, 0)
	s.register("forever", forever.URL)
	c := dial(t, s, "alice", "alice-key")

	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "stateful", "message": map[string]any{"role": "user", "content": "hi"}})
	var got []string
	var msgs []map[string]any
	for {
		m := c.next()
		msgs = append(msgs, m)
		if m["type"] == "state" {
			if m["source"] != "agent" {
				t.Fatalf("the agent's state %v does not say it is the agent's", m)
			}
			got = append(got, sv(m, "state"))
		}
		if m["type"] == "done" || (m["type"] == "error" && m["seq"] != nil) {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(names) || msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("client saw states %v and the run ended %v", got, msgs[len(msgs)-1])
	}
	if code, run := s.call("GET", "/v1/runs/"+sv(msgs[0], "run_id"), adminKey, nil); code != 200 || run["status"] != "DONE" {
		t.Fatalf("run %v", run)
	}

	// The platform's own states say so.
	started, _ := c.invokeUntilDeltas("forever", 1)
	c.send(map[string]any{"type": "cancel_run", "request_id": "x", "run_id": started["run_id"]})
	end := c.untilEnd()
	if last := end[len(end)-1]; last["type"] != "state" || last["state"] != "CANCELLED" || last["source"] != "platform" {
		t.Fatalf("the platform's cancel arrived as %v", last)
	}
	for _, e := range s.events("/v1/sessions/" + sv(msgs[0], "session_id") + "/events") {
		if e["type"] == "state" && e["payload"].(map[string]any)["source"] != "agent" {
			t.Fatalf("logged agent state %v", e)
		}
	}
}
