package e2e

import "testing"

// A queued run's first QUEUED answers its agent_invoke: it names the invoke's request_id and
// carries its message, as run_started does (which a queued run gets only once admitted, and
// never if it is cancelled while it waits), so a client knows its message was taken and a
// client resuming the session can show it. Later positions carry neither; a client resuming
// the session from seq 0 gets the first one as it was.
func TestQueuedStateNamesRequestID(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServerEnv(t, dsn, writeConfig(t, "limits: {max_active_runs: 1}\n"))
		ga := startGateAgent(t, s, "gate")
		alice := dial(t, s, "alice", "alice-key")
		held := sv(alice.invoke("gate", "hold"), "run_id")
		ga.next(t)

		invoke := func(c *client, requestID string) map[string]any {
			t.Helper()
			c.send(map[string]any{"type": "agent_invoke", "request_id": requestID, "agent_id": "gate", "message": map[string]any{"role": "user", "content": "hold"}})
			m := c.untilState("QUEUED")
			if m["request_id"] != requestID || sv(m, "run_id") == "" || sv(m, "session_id") == "" || sv(obj(m, "message"), "content") != "hold" {
				t.Fatalf("the first QUEUED of invoke %s: %v", requestID, m)
			}
			return m
		}
		bob := dial(t, s, "bob", "bob-key")
		first := invoke(bob, "bob-1")
		other := dial(t, s, "alice", "alice-key")
		if m := invoke(other, "alice-2"); num(obj(m, "detail"), "position") != 2 {
			t.Fatalf("alice's second run: %v", m)
		}

		// Resumed from seq 0, the session shows the same answer.
		again := dial(t, s, "bob", "bob-key")
		again.send(map[string]any{"type": "subscribe", "request_id": "sub", "session_id": sv(first, "session_id"), "after_seq": 0})
		if m := again.untilState("QUEUED"); m["request_id"] != "bob-1" || m["event_id"] != first["event_id"] {
			t.Fatalf("the replayed QUEUED: %v, first %v", m, first)
		}

		// Bob's run cancelled while queued: alice's second one moves up, told without a request_id.
		bob.send(map[string]any{"type": "cancel_run", "request_id": "c", "run_id": sv(first, "run_id")})
		bob.untilState("CANCELLED")
		if m := other.untilState("QUEUED"); num(obj(m, "detail"), "position") != 1 || m["request_id"] != nil || m["message"] != nil {
			t.Fatalf("the second run's new position: %v", m)
		}
		ga.release(held)
	})
}
