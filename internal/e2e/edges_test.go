package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A subscribe with after_seq past the session's end is refused with the
// session's last seq, and the connection goes on working: it once answered
// nothing and then skipped the session's next events as already seen.
func TestSubscribePastTheEndIsRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStream, 2)
		s.register("short", ag.URL)
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "short", "message": map[string]any{"role": "user", "content": "go"}})
		first := c.untilEnd()
		sid := first[0]["session_id"].(string)
		evs := s.events("/v1/sessions/" + sid + "/events")
		last := seqOf(evs[len(evs)-1])

		o := dial(t, s, "alice", "alice-key")
		o.send(map[string]any{"type": "subscribe", "request_id": "s1", "session_id": sid, "after_seq": last + 5})
		m, err := o.read(10 * time.Second)
		if err != nil {
			t.Fatalf("subscribe past the end answered nothing: %v", err)
		}
		if m["type"] != "error" || m["code"] != "invalid_after_seq" || m["request_id"] != "s1" || m["seq"] != nil {
			t.Fatalf("subscribe past the end: %v", m)
		}
		if got, _ := m["last_seq"].(float64); int64(got) != last {
			t.Fatalf("last_seq %v, want %d: %v", m["last_seq"], last, m)
		}

		// The same connection subscribes correctly and follows the next run live.
		o.send(map[string]any{"type": "subscribe", "request_id": "s2", "session_id": sid, "after_seq": last})
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r2", "session_id": sid, "agent_id": "short", "message": map[string]any{"role": "user", "content": "again"}})
		c.untilEnd()
		got := o.untilEnd()
		if got[0]["type"] != "run_started" || seqOf(got[0]) <= last || got[len(got)-1]["type"] != "done" {
			t.Fatalf("after the refused subscribe the connection saw %v … %v", got[0], got[len(got)-1])
		}
		assertIncreasingSeqs(t, got)
	})
}

// Another user's session answers exactly as a session that does not exist,
// over WebSocket and HTTP, so session ids cannot be probed: agent_invoke
// once said "forbidden … belongs to another user" where subscribe said
// session_not_found.
func TestAnotherUsersSessionLooksLikeNone(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStream, 1)
		s.register("short", ag.URL)
		alice := dial(t, s, "alice", "alice-key")
		alice.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "short", "message": map[string]any{"role": "user", "content": "secret"}})
		sid := alice.untilEnd()[0]["session_id"].(string)

		bob := dial(t, s, "bob", "bob-key")
		wsAnswer := func(msg map[string]any) map[string]any {
			t.Helper()
			bob.send(msg)
			m := bob.next()
			delete(m, "ts")
			return m
		}
		for _, typ := range []string{"agent_invoke", "subscribe"} {
			msg := func(session string) map[string]any {
				return map[string]any{"type": typ, "request_id": "b", "session_id": session, "after_seq": 0, "agent_id": "short", "message": map[string]any{"role": "user", "content": "hi"}}
			}
			foreign := wsAnswer(msg(sid))
			if foreign["type"] != "error" || foreign["code"] != "session_not_found" {
				t.Fatalf("%s into another user's session: %v", typ, foreign)
			}
			if typ == "subscribe" {
				// (agent_invoke with an unknown id creates that session.)
				if none := wsAnswer(msg("ses_none")); fmt.Sprint(none) != fmt.Sprint(foreign) {
					t.Fatalf("%s: another user's session %v, none %v", typ, foreign, none)
				}
			}
			if foreign["message"] != "no such session" {
				t.Fatalf("%s: message %q", typ, foreign["message"])
			}
		}

		for _, route := range []struct{ method, path string }{
			{"GET", "/events"}, {"GET", "/messages"}, {"POST", "/messages"},
		} {
			body := map[string]any{"role": "user", "content": "x"}
			codeF, foreign := s.call(route.method, "/v1/sessions/"+sid+route.path, "bob-key", body)
			codeN, none := s.call(route.method, "/v1/sessions/ses_none"+route.path, "bob-key", body)
			if codeF != http.StatusNotFound || errCode(foreign) != "session_not_found" || codeN != codeF || fmt.Sprint(none) != fmt.Sprint(foreign) {
				t.Fatalf("%s %s: another user's session %d %v, none %d %v", route.method, route.path, codeF, foreign, codeN, none)
			}
		}
	})
}
