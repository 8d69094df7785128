package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// words makes a message whose echo streams for a while (~50 ms a word).
func words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("word%d", i)
	}
	return strings.Join(w, " ")
}

func TestInvokeStreamsThroughSDKAgents(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		pythonAgent(t, s, "py-echo")
		goAgent(t, s, "go-echo")
		for _, agentID := range []string{"py-echo", "go-echo"} {
			t.Run(agentID, func(t *testing.T) {
				c := dial(t, s, "alice", "alice-key")
				c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": agentID, "message": map[string]any{"role": "user", "content": "hello there"}})
				msgs := c.untilEnd()
				first, last := msgs[0], msgs[len(msgs)-1]
				if first["type"] != "run_started" || first["request_id"] != "r1" || first["agent_id"] != agentID || first["run_id"] == nil {
					t.Fatalf("first message %v", first)
				}
				if msg, _ := first["message"].(map[string]any); msg["content"] != "hello there" {
					t.Fatalf("run_started does not carry the input: %v", first)
				}
				if last["type"] != "done" {
					t.Fatalf("run ended with %v", last)
				}
				if u, _ := last["usage"].(map[string]any); u["words"] == nil {
					t.Fatalf("done carries no usage: %v", last)
				}
				assertIncreasingSeqs(t, msgs)
				reply := text(msgs)
				if !strings.Contains(reply, "You said: hello there") || !strings.Contains(reply, "1 message") {
					t.Fatalf("reply %q", reply)
				}
				deltas := 0
				for _, m := range msgs {
					if m["type"] == "delta" {
						deltas++
					}
				}
				if deltas < 5 {
					t.Fatalf("reply came in %d deltas, want a stream", deltas)
				}
				sid := first["session_id"].(string)
				runID := first["run_id"].(string)

				// The replay holds every event with consecutive seqs, and the
				// client saw exactly its client-facing ones.
				replay := s.events("/v1/sessions/" + sid + "/events")
				types := map[string]int{}
				for i, e := range replay {
					if seqOf(e) != int64(i+1) {
						t.Fatalf("replay seq %d at %d", seqOf(e), i)
					}
					types[e["type"].(string)]++
				}
				for _, want := range []string{"user_input", "run_started", "agent_invoke_started", "agent_stream_delta", "agent_invoke_done", "run_done", "state"} {
					if types[want] == 0 {
						t.Fatalf("replay lacks %s: %v", want, types)
					}
				}
				if types["agent_stream_delta"] != deltas {
					t.Fatalf("replay has %d deltas, client saw %d", types["agent_stream_delta"], deltas)
				}
				seen := map[string]bool{}
				for _, m := range msgs {
					seen[m["event_id"].(string)] = true
				}
				for _, e := range replay {
					if clientFacing[e["type"].(string)] != seen[e["event_id"].(string)] {
						t.Fatalf("event %v: client-facing=%v, client saw it=%v", e["type"], clientFacing[e["type"].(string)], seen[e["event_id"].(string)])
					}
				}
				if got := s.events("/v1/runs/" + runID + "/events"); len(got) != len(replay) {
					t.Fatalf("run replay has %d events, session replay %d", len(got), len(replay))
				}
				code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
				if code != 200 || run["status"] != "DONE" || run["ended_at"] == nil || run["session_id"] != sid {
					t.Fatalf("run %d %v", code, run)
				}

				// Second turn: the agent reads the transcript through the platform.
				c.send(map[string]any{"type": "agent_invoke", "request_id": "r2", "session_id": sid, "agent_id": agentID, "message": map[string]any{"role": "user", "content": "again"}})
				msgs2 := c.untilEnd()
				if msgs2[len(msgs2)-1]["type"] != "done" || !strings.Contains(text(msgs2), "3 messages") {
					t.Fatalf("second turn: %q ended %v", text(msgs2), msgs2[len(msgs2)-1])
				}
				if seqOf(msgs2[0]) <= seqOf(last) {
					t.Fatalf("second run's seqs do not continue the session")
				}
				code, body := s.call("GET", "/v1/sessions/"+sid+"/messages", "alice-key", nil)
				list, _ := body["messages"].([]any)
				if code != 200 || len(list) != 4 {
					t.Fatalf("transcript %d %v", code, body)
				}
				if m := list[1].(map[string]any); m["role"] != "assistant" || m["content"] != reply {
					t.Fatalf("assistant transcript entry %v, want %q", m, reply)
				}
			})
		}
	})
}

var clientFacing = map[string]bool{"run_started": true, "agent_stream_delta": true, "state": true, "run_done": true, "run_failed": true, "run_cancelled": true, "approval_created": true, "tool_request": true}

func TestReconnectResumesExactlyTheMissedEvents(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		goAgent(t, s, "echo")
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "echo", "message": map[string]any{"role": "user", "content": words(40)}})
		var before []map[string]any
		for deltas := 0; deltas < 5; {
			m := c.next()
			before = append(before, m)
			if m["type"] == "delta" {
				deltas++
			}
		}
		c.conn.Close() // drop mid-stream
		sid := before[0]["session_id"].(string)
		lastSeq := seqOf(before[len(before)-1])
		time.Sleep(300 * time.Millisecond) // the run goes on without us

		c2 := dial(t, s, "alice", "alice-key")
		c2.send(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": lastSeq})
		after := c2.untilEnd()
		all := append(before, after...)
		assertIncreasingSeqs(t, all)
		if seqOf(after[0]) != lastSeq+1 && !clientFacingGap(s, sid, lastSeq, seqOf(after[0])) {
			t.Fatalf("resume started at seq %d after %d", seqOf(after[0]), lastSeq)
		}
		// Exactly the client-facing events of the replay, once each.
		var want []string
		for _, e := range s.events("/v1/sessions/" + sid + "/events") {
			if clientFacing[e["type"].(string)] {
				want = append(want, e["event_id"].(string))
			}
		}
		if len(all) != len(want) {
			t.Fatalf("client saw %d events over two connections, the log has %d client-facing", len(all), len(want))
		}
		for i := range want {
			if all[i]["event_id"] != want[i] {
				t.Fatalf("event %d: got %v, want %s", i, all[i]["event_id"], want[i])
			}
		}
		if !strings.Contains(text(all), "word39") {
			t.Fatalf("reply incomplete: %q", text(all))
		}
	})
}

// clientFacingGap reports whether every event between from and to is internal.
func clientFacingGap(s *server, sid string, from, to int64) bool {
	for _, e := range s.events(fmt.Sprintf("/v1/sessions/%s/events?after_seq=%d", sid, from)) {
		if seqOf(e) >= to {
			return true
		}
		if clientFacing[e["type"].(string)] {
			return false
		}
	}
	return true
}

func TestCancelMidStreamClosesTheAgentRequest(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStreamForever, 0)
		s.register("forever", ag.URL)
		c := dial(t, s, "alice", "alice-key")
		started, _ := c.invokeUntilDeltas("forever", 3)
		runID := started["run_id"].(string)
		c.send(map[string]any{"type": "cancel_run", "request_id": "c1", "run_id": runID})
		msgs := c.untilEnd()
		end := msgs[len(msgs)-1]
		if end["type"] != "state" || end["state"] != "CANCELLED" || end["seq"] == nil {
			t.Fatalf("cancel ended with %v", end)
		}
		select {
		case <-ag.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the agent's request was not closed after cancel")
		}
		code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
		if code != 200 || run["status"] != "CANCELLED" {
			t.Fatalf("run %v", run)
		}
		// Nothing arrives after the cancellation.
		if m, err := c.read(500 * time.Millisecond); err == nil {
			t.Fatalf("message after cancel: %v", m)
		}
		// A second cancel is refused; the session is free for a new run.
		c2 := dial(t, s, "alice", "alice-key")
		c2.send(map[string]any{"type": "cancel_run", "request_id": "c2", "run_id": runID})
		if m := c2.next(); m["type"] != "error" || m["code"] != "run_not_active" || m["request_id"] != "c2" || m["status"] != "CANCELLED" || m["run_id"] != runID {
			t.Fatalf("second cancel: %v", m)
		}
		replay := s.events("/v1/runs/" + runID + "/events")
		if replay[len(replay)-1]["type"] != "run_cancelled" && replay[len(replay)-2]["type"] != "run_cancelled" {
			t.Fatalf("replay does not end with the cancellation: %v", replay[len(replay)-1])
		}
		for _, e := range replay {
			if e["type"] == "agent_stream_delta" && seqOf(e) > seqOf(end) {
				t.Fatalf("delta logged after run_cancelled")
			}
		}
	})
}

func TestAgentFailuresFailTheRunWithTheirCode(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--agent-first-byte-timeout", "1s", "--agent-idle-timeout", "1s")
		for _, tc := range []struct {
			mode agentMode
			code string
		}{
			{modeHTTP500, "agent_http_error"},
			{modeMalformed, "agent_protocol_error"},
			{modeCloseEarly, "agent_disconnected"},
			{modeSilent, "agent_timeout"},
		} {
			t.Run(tc.code, func(t *testing.T) {
				ag := newScriptedAgent(t, tc.mode, 0)
				s.register("bad-"+tc.code[6:], ag.URL)
				c := dial(t, s, "alice", "alice-key")
				c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "bad-" + tc.code[6:], "message": map[string]any{"role": "user", "content": "hi"}})
				msgs := c.untilEnd()
				end := msgs[len(msgs)-1]
				if end["type"] != "error" || end["code"] != tc.code || end["message"] == "" {
					t.Fatalf("run ended with %v, want error %s", end, tc.code)
				}
				code, run := s.call("GET", "/v1/runs/"+end["run_id"].(string), adminKey, nil)
				errObj, _ := run["error"].(map[string]any)
				if code != 200 || run["status"] != "FAILED" || errObj["code"] != tc.code {
					t.Fatalf("run %v", run)
				}
			})
		}
	})
}

func TestSessionBusy(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	ag := newScriptedAgent(t, modeStreamForever, 0)
	s.register("forever", ag.URL)
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "forever", "message": map[string]any{"role": "user", "content": "one"}})
	started := c.next()
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r2", "session_id": started["session_id"], "agent_id": "forever", "message": map[string]any{"role": "user", "content": "two"}})
	for {
		m := c.next()
		if m["type"] == "error" {
			if m["code"] != "session_busy" || m["request_id"] != "r2" || m["seq"] != nil {
				t.Fatalf("second invoke: %v", m)
			}
			break
		}
	}
	// Another session runs concurrently without trouble.
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r3", "agent_id": "forever", "message": map[string]any{"role": "user", "content": "three"}})
	for {
		if m := c.next(); m["type"] == "run_started" && m["request_id"] == "r3" {
			if m["session_id"] == started["session_id"] {
				t.Fatal("new invoke reused the busy session")
			}
			break
		}
	}
}
