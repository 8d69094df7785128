package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/fakellm"
)

// The README's first command: --demo on a fresh SQLite file shows a real
// agent answering through the LLM proxy, traced and costed.
func TestDemoModeWorksOutOfTheBox(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/demo.db", "--demo")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.output(), "open the console:") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // the demo lines follow the listening line; this one is the last
	}
	m := regexp.MustCompile(`demo user key: (\S+)`).FindStringSubmatch(s.output())
	if m == nil || !strings.Contains(s.output(), "open the chat: "+s.URL+"/#user=demo&key="+m[1]+"&agent=demo") {
		t.Fatalf("demo output:\n%s", s.output())
	}
	c := dial(t, s, "demo", m[1])
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "hello demo"}})
	msgs := c.untilEnd()
	done := msgs[len(msgs)-1]
	if done["type"] != "done" || !strings.Contains(text(msgs), "hello demo") {
		t.Fatalf("demo reply %q ended %v", text(msgs), done)
	}
	if cost, _ := done["total_cost"].(float64); cost <= 0 {
		t.Fatalf("done carries no cost: %v", done)
	}
	var llmDone map[string]any
	for _, e := range s.events("/v1/runs/" + done["run_id"].(string) + "/events") {
		if e["type"] == "llm_call_done" {
			llmDone = e["payload"].(map[string]any)
		}
	}
	if llmDone == nil || llmDone["outcome"] != "ok" || llmDone["prompt_tokens"].(float64) <= 0 || llmDone["completion_tokens"].(float64) <= 0 || llmDone["estimated_cost"].(float64) <= 0 || llmDone["price"] == nil {
		t.Fatalf("llm_call_done: %v", llmDone)
	}
}

// TestDemoPromptsGoThroughTheLLM: each prompt the chat page suggests is
// answered by the OpenAI function-calling loop through the LLM proxy — the
// model (the built-in fake upstream, model demo-llm) picks the tool, the
// tool runs through the tool API, the model answers — so each run's trace
// holds llm_call_done events with tokens and a cost (README, quick start).
func TestDemoPromptsGoThroughTheLLM(t *testing.T) {
	s := startDemo(t)
	key := regexp.MustCompile(`demo user key: (\S+)`).FindStringSubmatch(s.output())[1]
	c := dial(t, s, "demo", key)
	sid := ""
	for _, tt := range []struct {
		prompt, tool, says string
	}{
		{"What's the weather in Paris?", "demo.weather", "city: Paris"},
		{"What time is it?", "client.now", "time_zone: Europe/Paris"},
		{"Send 250 to Bob", "demo.transfer", "status: sent"},
		// The demo's MCP server: a lookup, and a refund (behind an approval).
		{"Look up order 1042", "demo_mcp@lookup_order", "order_id: 1042"},
		{"Refund order 1042", "demo_mcp@refund", "status: refunded"},
	} {
		inv := map[string]any{"type": "agent_invoke", "request_id": "r-" + tt.tool, "agent_id": "demo", "message": map[string]any{"role": "user", "content": tt.prompt}}
		if sid != "" {
			inv["session_id"] = sid
		}
		c.send(inv)
		var msgs []map[string]any
		for {
			m := c.next()
			msgs = append(msgs, m)
			// The page's part: run the client tool, approve the transfer.
			switch m["type"] {
			case "tool_request":
				c.send(map[string]any{"type": "tool_result", "request_id": "tr", "run_id": m["run_id"], "tool_call_id": m["tool_call_id"], "ok": true,
					"result": map[string]any{"iso": "2026-01-02T10:00:00+01:00", "time_zone": "Europe/Paris"}})
			case "approval_required":
				c.send(map[string]any{"type": "approval_decision", "request_id": "ad", "run_id": m["run_id"], "approval_id": m["approval_id"], "decision": "approve"})
			}
			if isEnd(m) {
				break
			}
		}
		done := msgs[len(msgs)-1]
		if done["type"] != "done" || !strings.Contains(text(msgs), tt.says) {
			t.Fatalf("%q: reply %q ended %v", tt.prompt, text(msgs), done)
		}
		sid = done["session_id"].(string)
		runID := done["run_id"].(string)
		var llmCalls []map[string]any
		var tools []string
		// LLM events are recorded behind the call: wait for both to land.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && len(llmCalls) < 2; time.Sleep(20 * time.Millisecond) {
			llmCalls, tools = nil, nil
			for _, e := range s.events("/v1/runs/" + runID + "/events") {
				p, _ := e["payload"].(map[string]any)
				switch e["type"] {
				case "llm_call_done":
					llmCalls = append(llmCalls, p)
				case "tool_call_created":
					tools = append(tools, fmt.Sprint(p["tool_name"]))
				}
			}
		}
		if len(tools) != 1 || tools[0] != tt.tool {
			t.Errorf("%q: tool calls %v, want the model's pick %s", tt.prompt, tools, tt.tool)
		}
		// One call that picks the tool, one that answers with its result.
		if len(llmCalls) != 2 {
			t.Fatalf("%q: %d llm_call_done events, want 2", tt.prompt, len(llmCalls))
		}
		for _, d := range llmCalls {
			if d["outcome"] != "ok" || d["model"] != "demo-llm" || d["prompt_tokens"].(float64) <= 0 || d["completion_tokens"].(float64) <= 0 || d["estimated_cost"].(float64) <= 0 {
				t.Errorf("%q: llm_call_done %v", tt.prompt, d)
			}
		}
	}
}

func TestLLMProxyAuthAndAttribution(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		up := httptest.NewServer(fakellm.New(fakellm.Options{}))
		t.Cleanup(up.Close)
		s := startServerEnv(t, dsn, []string{"AGENTPLANE_LLM_BASE_URL=" + up.URL + "/v1", "AGENTPLANE_LLM_API_KEY=upstream-secret"})
		// The run stays active while its agent calls the LLM.
		ag := newScriptedAgent(t, modeStreamForever, 0)
		keyA := s.register("a", ag.URL)
		keyB := s.register("b", ag.URL)
		c := dial(t, s, "alice", "alice-key")
		started, _ := c.invokeUntilDeltas("a", 1)
		runID, sid := started["run_id"].(string), started["session_id"].(string)
		body := map[string]any{"model": "fake-gpt", "messages": []map[string]string{{"role": "user", "content": "ping"}}}

		for name, tc := range map[string]struct {
			key  string
			hdr  []string
			want int
		}{
			"no key":               {"", nil, http.StatusUnauthorized},
			"unknown key":          {"nope", nil, http.StatusUnauthorized},
			"admin key":            {adminKey, nil, http.StatusForbidden},
			"user key":             {"alice-key", nil, http.StatusForbidden},
			"another agent's run":  {keyB, []string{"x-run-id", runID}, http.StatusForbidden},
			"unknown run":          {keyA, []string{"x-run-id", "run_nope"}, http.StatusForbidden},
			"run in other session": {keyA, []string{"x-run-id", runID, "x-session-id", "ses_other"}, http.StatusForbidden},
			"own run":              {keyA, []string{"x-run-id", runID, "x-session-id", sid}, http.StatusOK},
			"no run":               {keyB, nil, http.StatusOK},
		} {
			t.Run(name, func(t *testing.T) {
				code, resp := s.call("POST", "/v1/chat/completions", tc.key, body, tc.hdr...)
				if code != tc.want {
					t.Fatalf("%d %v, want %d", code, resp, tc.want)
				}
				if code != 200 && errCode(resp) == "" {
					t.Fatalf("error without code: %v", resp)
				}
			})
		}
		// Recording is written behind the call: wait for it to land.
		var calls []map[string]any
		var agentEvents []map[string]any
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			calls = nil
			for _, e := range s.events("/v1/sessions/" + sid + "/events") {
				if e["type"] == "llm_call_done" {
					if e["run_id"] != runID {
						t.Fatalf("llm event attributed to %v", e["run_id"])
					}
					calls = append(calls, e["payload"].(map[string]any))
				}
			}
			if code, _ := s.call("GET", "/v1/sessions/agent:b/events", adminKey, nil); code == 200 {
				agentEvents = s.events("/v1/sessions/agent:b/events")
			}
			// A fast call is recorded by llm_call_done alone (its start is
			// in started_at; llm_call_started only for calls still running
			// after llm.started_event_after).
			if len(calls) == 1 && len(agentEvents) == 1 {
				break
			}
		}
		if len(calls) != 1 || calls[0]["outcome"] != "ok" || calls[0]["prompt_tokens"].(float64) <= 0 {
			t.Fatalf("run's llm calls: %v", calls)
		}
		// The run-less call is attributed to agent b's own session.
		if len(agentEvents) != 1 || agentEvents[0]["type"] != "llm_call_done" || agentEvents[0]["run_id"] != "" {
			raw, _ := json.Marshal(agentEvents)
			t.Fatalf("agent session events: %s", raw)
		}
		// Users cannot use the agent session namespace (a fresh client:
		// the first one still receives the run's deltas).
		c = dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "x", "session_id": "agent:b", "agent_id": "a", "message": map[string]any{"role": "user", "content": "hi"}})
		if m := c.next(); m["code"] != "invalid_session_id" {
			t.Fatalf("user in agent session: %v", m)
		}
	})
}

func TestLLMProxyNotConfigured(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	ag := newScriptedAgent(t, modeStream, 1)
	key := s.register("a", ag.URL)
	code, body := s.call("POST", "/v1/chat/completions", key, map[string]any{"model": "m", "messages": []any{}})
	if code != http.StatusServiceUnavailable || errCode(body) != "llm_not_configured" {
		t.Fatalf("%d %v", code, body)
	}
}

// llmCall POSTs a chat completion as the agent with key for runID (raw
// HTTP, as any OpenAI SDK would send it).
func llmCall(s *server, key, runID string, stream bool) (int, map[string]any) {
	s.t.Helper()
	body := map[string]any{"model": "fake-gpt", "stream": stream, "messages": []map[string]string{{"role": "user", "content": "ping"}}}
	if !stream {
		return s.call("POST", "/v1/chat/completions", key, body, "x-run-id", runID)
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("x-run-id", runID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("llm call: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if resp.StatusCode != 200 {
		if err := json.Unmarshal(raw, &out); err != nil {
			s.t.Fatalf("error answer is not JSON: %q", raw)
		}
	}
	return resp.StatusCode, out
}

// assertNoLLMEventsAfterEnd checks that nothing of an LLM call was logged
// after the run's terminal event. A later run of the same session is the
// barrier: the log commits a session's writes in order, so anything
// queued for the ended run is committed once that run has ended.
func assertNoLLMEventsAfterEnd(t *testing.T, s *server, c *client, agentID, sid, runID string) {
	t.Helper()
	c.send(map[string]any{"type": "agent_invoke", "request_id": "barrier", "session_id": sid, "agent_id": agentID, "message": map[string]any{"role": "user", "content": "again"}})
	c.untilEnd()
	ended := false
	for _, e := range s.events("/v1/sessions/" + sid + "/events") {
		if e["run_id"] != runID {
			continue
		}
		switch typ := e["type"].(string); {
		case typ == "run_done" || typ == "run_failed" || typ == "run_cancelled":
			ended = true
		case ended:
			t.Fatalf("%s logged after the run ended: %v", typ, e)
		}
	}
	if !ended {
		t.Fatalf("run %s has no terminal event", runID)
	}
}

// The LLM proxy refuses x-run-id of a run that has ended (409
// run_not_active, as the tool API does) and logs nothing for it: the run's
// trace ends with its terminal event.
func TestLLMProxyRefusesEndedRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		up := httptest.NewServer(fakellm.New(fakellm.Options{}))
		t.Cleanup(up.Close)
		s := startServerEnv(t, dsn, []string{"AGENTPLANE_LLM_BASE_URL=" + up.URL + "/v1"})
		key := s.register("a", newScriptedAgent(t, modeStream, 2).URL)
		keyF := s.register("forever", newScriptedAgent(t, modeStreamForever, 0).URL)
		c := dial(t, s, "alice", "alice-key")

		t.Run("done", func(t *testing.T) {
			c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "a", "message": map[string]any{"role": "user", "content": "hi"}})
			msgs := c.untilEnd()
			runID, sid := sv(msgs[0], "run_id"), sv(msgs[0], "session_id")
			if msgs[len(msgs)-1]["type"] != "done" {
				t.Fatalf("run ended %v", msgs[len(msgs)-1])
			}
			for _, stream := range []bool{false, true} {
				code, body := llmCall(s, key, runID, stream)
				if code != http.StatusConflict || errCode(body) != "run_not_active" || sv(obj(body, "error"), "status") != "DONE" || sv(obj(body, "error"), "run_id") != runID {
					t.Fatalf("LLM call (stream %v) for a DONE run: %d %v, want run_not_active with the run's status and run_id", stream, code, body)
				}
			}
			assertNoLLMEventsAfterEnd(t, s, c, "a", sid, runID)
		})

		t.Run("cancelled", func(t *testing.T) {
			// A call while the run is active is served (and its status is
			// cached); the cancel must still be seen by the next call.
			started, _ := c.invokeUntilDeltas("forever", 1)
			runID, sid := sv(started, "run_id"), sv(started, "session_id")
			if code, body := llmCall(s, keyF, runID, false); code != 200 {
				t.Fatalf("LLM call for an active run: %d %v", code, body)
			}
			// Its record is written behind the call: let it land before the
			// cancel (a call still in flight when its run ends is recorded
			// when it ends, after the run's terminal event).
			waitEvent(t, s, sid, "llm_call_done")
			c.send(map[string]any{"type": "cancel_run", "request_id": "x", "run_id": runID})
			c.untilEnd()
			if code, body := llmCall(s, keyF, runID, true); code != http.StatusConflict || errCode(body) != "run_not_active" {
				t.Fatalf("LLM call for a cancelled run: %d %v", code, body)
			}
			c2 := dial(t, s, "alice", "alice-key")
			c2.send(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
			c2.untilEnd()
			assertNoLLMEventsAfterEnd(t, s, c2, "a", sid, runID)
		})
	})
}

// Across replicas: replica B served an LLM call of a run driven by A; once
// A cancels the run, B refuses the next call (B hears of the end through
// the PostgreSQL notification, as its clients do).
func TestLLMProxyRefusesRunEndedOnAnotherReplica(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	up := httptest.NewServer(fakellm.New(fakellm.Options{}))
	t.Cleanup(up.Close)
	env := []string{"AGENTPLANE_LLM_BASE_URL=" + up.URL + "/v1"}
	a := startServerEnv(t, dsn, env, "--instance-id", "llm-a")
	b := startServerEnv(t, dsn, env, "--instance-id", "llm-b")
	key := a.register("forever", newScriptedAgent(t, modeStreamForever, 0).URL)
	ca := dial(t, a, "alice", "alice-key")
	started, _ := ca.invokeUntilDeltas("forever", 1)
	runID, sid := sv(started, "run_id"), sv(started, "session_id")
	if code, body := llmCall(b, key, runID, false); code != 200 {
		t.Fatalf("LLM call on B for an active run: %d %v", code, body)
	}
	cb := dial(t, b, "alice", "alice-key")
	cb.send(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
	// B's catch-up read of the session first (it returns the run's delta):
	// an end that a subscription reads while catching up reaches the client
	// without B's notification, so B's run cache could not have heard of it
	// yet; the end must reach B as the test says, by the notification.
	for m := cb.next(); m["type"] != "delta"; m = cb.next() {
	}
	ca.send(map[string]any{"type": "cancel_run", "request_id": "x", "run_id": runID})
	ca.untilEnd()
	cb.untilEnd() // B has heard of the end
	if code, body := llmCall(b, key, runID, false); code != http.StatusConflict || errCode(body) != "run_not_active" {
		t.Fatalf("LLM call on B for a run cancelled on A: %d %v", code, body)
	}
}

// waitEvent waits until the session's log holds an event of type typ.
func waitEvent(t *testing.T, s *server, sid, typ string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, e := range s.events("/v1/sessions/" + sid + "/events") {
			if e["type"] == typ {
				return
			}
		}
	}
	t.Fatalf("no %s in session %s", typ, sid)
}
