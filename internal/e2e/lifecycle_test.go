package e2e

import (
	"strings"
	"testing"
	"time"
)

func TestKilledServerFailsItsRunsOnRestart(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStreamForever, 0)
		s.register("forever", ag.URL)
		c := dial(t, s, "alice", "alice-key")
		started, last := c.invokeUntilDeltas("forever", 3)
		s.kill() // no chance to clean up
		s.restart()

		c2 := dial(t, s, "alice", "alice-key")
		c2.send(map[string]any{"type": "subscribe", "session_id": started["session_id"], "after_seq": seqOf(last)})
		msgs := c2.untilEnd()
		end := msgs[len(msgs)-1]
		if end["type"] != "error" || end["code"] != "platform_restarted" || end["run_id"] != started["run_id"] {
			t.Fatalf("resume after restart ended with %v", end)
		}
		code, run := s.call("GET", "/v1/runs/"+started["run_id"].(string), adminKey, nil)
		if code != 200 || run["status"] != "FAILED" {
			t.Fatalf("run after restart: %v", run)
		}
		// The session is usable again.
		c2.send(map[string]any{"type": "agent_invoke", "request_id": "r2", "session_id": started["session_id"], "agent_id": "forever", "message": map[string]any{"role": "user", "content": "again"}})
		if m := c2.next(); m["type"] != "run_started" {
			t.Fatalf("new run after restart: %v", m)
		}
	})
}

func TestGracefulShutdown(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		t.Run("in-flight run finishes", func(t *testing.T) {
			s := startServer(t, dsn, "--shutdown-grace", "20s")
			ag := newScriptedAgent(t, modeStream, 20) // ~1 s of deltas
			s.register("short", ag.URL)
			c := dial(t, s, "alice", "alice-key")
			c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "short", "message": map[string]any{"role": "user", "content": "go"}})
			started := c.next()
			s.stop()
			s.restart()
			code, run := s.call("GET", "/v1/runs/"+started["run_id"].(string), adminKey, nil)
			if code != 200 || run["status"] != "DONE" {
				t.Fatalf("run after graceful stop: %v\n%s", run, s.output())
			}
			evs := s.events("/v1/runs/" + started["run_id"].(string) + "/events")
			deltas := 0
			for _, e := range evs {
				if e["type"] == "agent_stream_delta" {
					deltas++
				}
			}
			if deltas != 20 || evs[len(evs)-1]["type"] != "run_done" {
				t.Fatalf("%d deltas, last event %v", deltas, evs[len(evs)-1]["type"])
			}
		})
		t.Run("run past the grace period fails with a reason", func(t *testing.T) {
			s := startServer(t, dsn, "--shutdown-grace", "300ms")
			ag := newScriptedAgent(t, modeStreamForever, 0)
			s.register("forever", ag.URL)
			c := dial(t, s, "alice", "alice-key")
			started, _ := c.invokeUntilDeltas("forever", 2)
			// More clients following the session: each must get the run's
			// last event before its socket closes (the drain once compared
			// a cursor that moves before the write, and closed early).
			clients := []*client{c}
			for range 8 {
				o := dial(t, s, "alice", "alice-key")
				o.send(map[string]any{"type": "subscribe", "session_id": started["session_id"], "after_seq": seqOf(started)})
				clients = append(clients, o)
			}
			for _, o := range clients[1:] {
				for m := o.next(); m["type"] != "delta"; m = o.next() {
				}
			}
			stopped := time.Now()
			// Each client reads while the server stops, as a real one does.
			saw := make([]chan bool, len(clients))
			for i, o := range clients {
				saw[i] = make(chan bool, 1)
				go func() {
					sawFailure := false
					for {
						m, err := o.read(10 * time.Second)
						if err != nil {
							break
						}
						if m["type"] == "error" && m["code"] == "platform_shutdown" {
							sawFailure = true
						}
					}
					saw[i] <- sawFailure
				}()
			}
			s.stop()
			if d := time.Since(stopped); d > 10*time.Second {
				t.Fatalf("shutdown took %v", d)
			}
			// Every connected client saw the failure before the socket closed.
			for i := range clients {
				if !<-saw[i] {
					t.Errorf("client %d did not receive the platform_shutdown failure before close", i)
				}
			}
			s.restart()
			code, run := s.call("GET", "/v1/runs/"+started["run_id"].(string), adminKey, nil)
			errObj, _ := run["error"].(map[string]any)
			if code != 200 || run["status"] != "FAILED" || errObj["code"] != "platform_shutdown" {
				t.Fatalf("run after shutdown: %v", run)
			}
			if !strings.Contains(s.output(), "agentplane stopped") {
				t.Fatalf("no clean stop in output:\n%s", s.output())
			}
		})
	})
}

// Two replicas on one PostgreSQL database: a client attached to one follows,
// live, a run driven by the other.
func TestReplicaFollowsRunsDrivenByAnother(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "replica-a")
	b := startServer(t, dsn, "--instance-id", "replica-b")
	ag := newScriptedAgent(t, modeStream, 40)
	a.register("slow", ag.URL)
	ca := dial(t, a, "alice", "alice-key")
	ca.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "slow", "message": map[string]any{"role": "user", "content": "go"}})
	started := ca.next()
	cb := dial(t, b, "alice", "alice-key")
	cb.send(map[string]any{"type": "subscribe", "session_id": started["session_id"], "after_seq": 0})
	msgs := cb.untilEnd()
	assertIncreasingSeqs(t, msgs)
	if msgs[len(msgs)-1]["type"] != "done" || !strings.Contains(text(msgs), "w39") {
		t.Fatalf("replica b saw %d messages ending %v", len(msgs), msgs[len(msgs)-1])
	}
	live := 0
	for _, m := range msgs {
		if m["type"] == "delta" {
			live++
		}
	}
	if live != 40 {
		t.Fatalf("replica b saw %d of 40 deltas", live)
	}
}
