package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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

// rawCall does a request and returns the status, headers and body as sent.
func rawCall(t *testing.T, s *server, method, path, key string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

// Every refusal over HTTP is the JSON error envelope, says what is wrong in
// the API's terms (no Go type names), and names the limit it enforces:
// unknown paths and wrong methods once answered plain text, unknown
// registration fields were ignored for agents, 413s said only "too large".
func TestHTTPErrorsAreJSONEnvelopes(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	ag := newScriptedAgent(t, modeStream, 1)
	goodAgent := `"agent_id":"x","endpoint":"` + ag.URL + `"`
	agentKey := s.register("ctx-agent", ag.URL)
	cases := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
		message                       string // a part of the message
		allow                         string // the Allow header wanted
	}{
		{name: "unknown path", method: "GET", path: "/v1/nope", key: adminKey, status: 404, code: "not_found", message: "GET /v1/nope"},
		{name: "unknown path without a key", method: "GET", path: "/nope", status: 404, code: "not_found"},
		{name: "wrong method", method: "DELETE", path: "/v1/agents", key: adminKey, status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
		{name: "wrong method on a health check", method: "POST", path: "/healthz", status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
		// A ":verb" path takes POST only, though ServeMux's wildcard would
		// read "x:heartbeat" as an id; an id path does not take the verb
		// route's POST (found by an external audit: 404s, and POST listed).
		{name: "GET of a verb", method: "GET", path: "/v1/agents/ctx-agent:heartbeat", key: adminKey, status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "GET of an agent's invoke", method: "GET", path: "/v1/agents/ctx-agent:invoke", key: adminKey, status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "DELETE of a tool's invoke", method: "DELETE", path: "/v1/tools/t.x:invoke", key: adminKey, status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "GET of a wait", method: "GET", path: "/v1/tool_calls/tc_x:wait", key: adminKey, status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "GET of a run's cancel", method: "GET", path: "/v1/runs/run_x:cancel", key: adminKey, status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "GET of a decide", method: "GET", path: "/v1/approvals/ap_x:decide", key: adminKey, status: 405, code: "method_not_allowed", allow: "POST"},
		{name: "PUT of an agent", method: "PUT", path: "/v1/agents/ctx-agent", key: adminKey, status: 405, code: "method_not_allowed", allow: "DELETE, GET, HEAD"},
		{name: "POST of an agent", method: "POST", path: "/v1/agents/ctx-agent", key: adminKey, status: 405, code: "method_not_allowed", allow: "DELETE, GET, HEAD"},
		{name: "POST of a tool", method: "POST", path: "/v1/tools/t.x", key: adminKey, status: 405, code: "method_not_allowed", allow: "DELETE, GET, HEAD, PUT"},
		{name: "an unknown verb", method: "POST", path: "/v1/agents/ctx-agent:bogus", key: adminKey, status: 404, code: "not_found", message: "unknown agent operation"},
		{name: "unknown registration field", method: "POST", path: "/v1/agents/register", key: adminKey, body: `{` + goodAgent + `,"linked_agent":["y"]}`, status: 400, code: "invalid_json", message: `unknown field "linked_agent"`},
		{name: "registration field of the wrong type", method: "POST", path: "/v1/agents/register", key: adminKey, body: `{` + goodAgent + `,"capabilities":"chat"}`, status: 400, code: "invalid_json", message: "capabilities: expected an array of strings, got string"},
		{name: "unknown tool field", method: "PUT", path: "/v1/tools/t.x", key: adminKey, body: `{"kind":"client","polcy":{}}`, status: 400, code: "invalid_json", message: `unknown field "polcy"`},
		{name: "tool field of the wrong type", method: "PUT", path: "/v1/tools/t.x", key: adminKey, body: `{"kind":"client","timeout_ms":"soon"}`, status: 400, code: "invalid_json", message: "timeout_ms: expected an integer, got string"},
		{name: "not JSON", method: "POST", path: "/v1/agents/register", key: adminKey, body: `{"agent_id":`, status: 400, code: "invalid_json"},
		{name: "oversize registration", method: "POST", path: "/v1/agents/register", key: adminKey, body: `{"name":"` + strings.Repeat("x", 1<<20) + `"}`, status: 413, code: "request_too_large", message: "request body exceeds 1 MiB"},
		{name: "oversize context blob", method: "PUT", path: "/v1/context/k", key: agentKey, body: `{"data":"` + strings.Repeat("x", 4<<20) + `"}`, status: 413, code: "request_too_large", message: "request body exceeds 4 MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, raw := rawCall(t, s, tc.method, tc.path, tc.key, []byte(tc.body))
			var env struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(raw, &env); err != nil || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %s %q: not a JSON envelope", status, hdr.Get("Content-Type"), raw)
			}
			if status != tc.status || env.Error.Code != tc.code || !strings.Contains(env.Error.Message, tc.message) {
				t.Fatalf("%d %s, want %d %s with %q", status, raw, tc.status, tc.code, tc.message)
			}
			if tc.allow != hdr.Get("Allow") {
				t.Fatalf("Allow %q, want %s", hdr.Get("Allow"), tc.allow)
			}
			for _, leak := range []string{"Go struct", "RegisterRequest", "Definition", "[]string", "int64"} {
				if strings.Contains(env.Error.Message, leak) {
					t.Fatalf("message %q leaks %q", env.Error.Message, leak)
				}
			}
		})
	}
	if code, _ := s.call("GET", "/v1/agents/x", adminKey, nil); code != http.StatusNotFound {
		t.Fatalf("a refused registration stored agent x: %d", code)
	}

	t.Run("WebSocket messages speak JSON too", func(t *testing.T) {
		c := dial(t, s, "alice", "alice-key")
		c.sendRaw([]byte(`{"type":"subscribe","request_id":"q","session_id":5,"after_seq":0}`))
		m := c.next()
		if m["type"] != "error" || m["code"] != "invalid_json" || !strings.Contains(fmt.Sprint(m["message"]), "session_id: expected a string, got number") || strings.Contains(fmt.Sprint(m["message"]), "Go struct") {
			t.Fatalf("got %v", m)
		}
	})
}

// GET /v1/runs/{run_id} of an active run has no ended_at or error (not even
// null) and shows usage as an object; once ended, all three are there.
func TestRunViewWhileActiveAndEnded(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	ag := newScriptedAgent(t, modeStream, 20) // ~1 s
	s.register("slow", ag.URL)
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "slow", "message": map[string]any{"role": "user", "content": "go"}})
	runID := c.next()["run_id"].(string)
	_, _, raw := rawCall(t, s, "GET", "/v1/runs/"+runID, adminKey, nil)
	var active map[string]json.RawMessage
	json.Unmarshal(raw, &active)
	if string(active["status"]) != `"RUNNING"` {
		t.Fatalf("the run ended too soon for this test: %s", raw)
	}
	if _, ok := active["ended_at"]; ok {
		t.Fatalf("active run shows ended_at: %s", raw)
	}
	if _, ok := active["error"]; ok {
		t.Fatalf("active run shows error: %s", raw)
	}
	if string(active["usage"]) != "{}" {
		t.Fatalf("active run's usage %s, want {}: %s", active["usage"], raw)
	}
	c.untilEnd()
	code, done := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
	if u, _ := done["usage"].(map[string]any); code != 200 || done["status"] != "DONE" || done["ended_at"] == nil || u["words"] != float64(20) {
		t.Fatalf("ended run: %d %v", code, done)
	}
}

// Agents declared in the config file are still registered (they bypass the
// HTTP body decoding that now refuses unknown fields).
func TestConfigFileAgentsRegister(t *testing.T) {
	ag := newScriptedAgent(t, modeStream, 1)
	cfg := filepath.Join(t.TempDir(), "agents.yaml")
	os.WriteFile(cfg, []byte("agents:\n  - agent_id: cfg-agent\n    endpoint: "+ag.URL+"\n    capabilities: [chat]\n"), 0o600)
	s := startServerEnv(t, "sqlite:"+t.TempDir()+"/a.db", []string{"AGENTPLANE_CONFIG=" + cfg})
	code, body := s.call("GET", "/v1/agents/cfg-agent", adminKey, nil)
	if code != http.StatusOK || body["endpoint"] != ag.URL {
		t.Fatalf("config file agent: %d %v", code, body)
	}
}
