package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestWebSocketBadInputKeepsTheConnection(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--max-frame-bytes", "4096")
	ag := newScriptedAgent(t, modeStream, 3)
	s.register("short", ag.URL)

	t.Run("hello", func(t *testing.T) {
		for name, hello := range map[string]any{
			"wrong key":     map[string]any{"type": "hello", "user_id": "alice", "api_key": "bob-key"},
			"unknown user":  map[string]any{"type": "hello", "user_id": "mallory", "api_key": "x"},
			"missing":       map[string]any{"type": "agent_invoke", "agent_id": "short"},
			"not json":      "{{{",
			"empty api key": map[string]any{"type": "hello", "user_id": "alice"},
		} {
			t.Run(name, func(t *testing.T) {
				c := dialRaw(t, s)
				if raw, ok := hello.(string); ok {
					c.sendRaw([]byte(raw))
				} else {
					c.send(hello)
				}
				if m := c.next(); m["type"] != "error" || m["code"] != "unauthorized" {
					t.Fatalf("got %v", m)
				}
				if _, err := c.read(5 * time.Second); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
					t.Fatalf("connection not closed after a failed hello: %v", err)
				}
			})
		}
	})

	c := dial(t, s, "alice", "alice-key")
	expectErr := func(t *testing.T, code, requestID string) {
		t.Helper()
		m := c.next()
		if m["type"] != "error" || m["code"] != code || m["seq"] != nil {
			t.Fatalf("got %v, want error %s without seq", m, code)
		}
		if requestID != "" && m["request_id"] != requestID {
			t.Fatalf("error %v does not carry request_id %s", m, requestID)
		}
	}
	cases := []struct {
		name    string
		raw     string
		msg     map[string]any
		code    string
		request string
	}{
		{name: "invalid json", raw: `{"type":`, code: "invalid_json"},
		{name: "json array", raw: `[1,2]`, code: "invalid_json"},
		{name: "no type", msg: map[string]any{"request_id": "q1"}, code: "invalid_message", request: "q1"},
		{name: "unknown type", msg: map[string]any{"type": "teleport", "request_id": "q2"}, code: "unknown_type", request: "q2"},
		{name: "invoke without agent", msg: map[string]any{"type": "agent_invoke", "request_id": "q3", "message": map[string]any{"role": "user", "content": "x"}}, code: "invalid_message", request: "q3"},
		{name: "invoke non-string content", msg: map[string]any{"type": "agent_invoke", "request_id": "q4", "agent_id": "short", "message": map[string]any{"role": "user", "content": 5}}, code: "invalid_message", request: "q4"},
		{name: "invoke unknown agent", msg: map[string]any{"type": "agent_invoke", "request_id": "q5", "agent_id": "ghost", "message": map[string]any{"role": "user", "content": "x"}}, code: "agent_not_found", request: "q5"},
		{name: "invoke bad session id", msg: map[string]any{"type": "agent_invoke", "request_id": "q6", "agent_id": "short", "session_id": "../../etc", "message": map[string]any{"role": "user", "content": "x"}}, code: "invalid_session_id", request: "q6"},
		{name: "subscribe unknown session", msg: map[string]any{"type": "subscribe", "request_id": "q7", "session_id": "ses_nope", "after_seq": 0}, code: "session_not_found", request: "q7"},
		{name: "subscribe negative seq", msg: map[string]any{"type": "subscribe", "request_id": "q8", "session_id": "x", "after_seq": -1}, code: "invalid_message", request: "q8"},
		{name: "cancel unknown run", msg: map[string]any{"type": "cancel_run", "request_id": "q9", "run_id": "run_nope"}, code: "run_not_found", request: "q9"},
		{name: "second hello", msg: map[string]any{"type": "hello", "user_id": "alice", "api_key": "alice-key"}, code: "invalid_message"},
		{name: "oversized frame", raw: `{"type":"agent_invoke","pad":"` + strings.Repeat("x", 8000) + `"}`, code: "message_too_large"},
		// Its request_id is named when it comes before the bulk.
		{name: "oversized frame with its request_id", raw: `{"type":"agent_invoke","request_id":"q10","message":{"role":"user","content":"` + strings.Repeat("x", 8000) + `"}}`, code: "message_too_large", request: "q10"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.raw != "" {
				c.sendRaw([]byte(tc.raw))
			} else {
				c.send(tc.msg)
			}
			expectErr(t, tc.code, tc.request)
		})
	}
	t.Run("binary frame", func(t *testing.T) {
		c.conn.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3})
		expectErr(t, "invalid_message", "")
	})

	// After all that, the same connection still works, and nothing was stored.
	code, body := s.call("GET", "/v1/agents", adminKey, nil)
	if code != 200 || len(body["agents"].([]any)) != 1 {
		t.Fatalf("agents after bad input: %v", body)
	}
	c.send(map[string]any{"type": "agent_invoke", "request_id": "ok", "agent_id": "short", "message": map[string]any{"role": "user", "content": "fine"}})
	msgs := c.untilEnd()
	if msgs[0]["type"] != "run_started" || msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("valid invoke after bad input: %v", msgs)
	}

	t.Run("frames far over the limit close the connection", func(t *testing.T) {
		c2 := dial(t, s, "alice", "alice-key")
		c2.sendRaw([]byte(strings.Repeat("x", 4096*17)))
		for {
			_, err := c2.read(5 * time.Second)
			if err != nil {
				if !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
					t.Fatalf("want close 1009, got %v", err)
				}
				return
			}
		}
	})
}

func TestUsersOnlyReachTheirOwnSessions(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	ag := newScriptedAgent(t, modeStreamForever, 0)
	s.register("forever", ag.URL)
	alice := dial(t, s, "alice", "alice-key")
	alice.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "forever", "message": map[string]any{"role": "user", "content": "secret"}})
	started := alice.next()
	sid, runID := started["session_id"], started["run_id"].(string)

	bob := dial(t, s, "bob", "bob-key")
	bob.send(map[string]any{"type": "subscribe", "request_id": "b1", "session_id": sid, "after_seq": 0})
	if m := bob.next(); m["type"] != "error" || m["code"] != "session_not_found" {
		t.Fatalf("bob subscribing to alice's session: %v", m)
	}
	bob.send(map[string]any{"type": "agent_invoke", "request_id": "b2", "session_id": sid, "agent_id": "forever", "message": map[string]any{"role": "user", "content": "hi"}})
	if m := bob.next(); m["type"] != "error" || (m["code"] != "session_not_found") {
		t.Fatalf("bob invoking in alice's session: %v", m)
	}
	bob.send(map[string]any{"type": "cancel_run", "request_id": "b3", "run_id": runID})
	if m := bob.next(); m["type"] != "error" || m["code"] != "run_not_found" {
		t.Fatalf("bob cancelling alice's run: %v", m)
	}
	for _, path := range []string{"/v1/sessions/" + sid.(string) + "/messages", "/v1/sessions/" + sid.(string) + "/events", "/v1/runs/" + runID} {
		if code, _ := s.call("GET", path, "bob-key", nil); code != http.StatusNotFound {
			t.Fatalf("bob GET %s: %d", path, code)
		}
		if code, _ := s.call("GET", path, "alice-key", nil); code != http.StatusOK {
			t.Fatalf("alice GET %s: %d", path, code)
		}
	}
	if code, _ := s.call("POST", "/v1/runs/"+runID+":cancel", "bob-key", nil); code != http.StatusNotFound {
		t.Fatalf("bob cancel over HTTP: %d", code)
	}
	if code, body := s.call("POST", "/v1/runs/"+runID+":cancel", "alice-key", map[string]any{"reason": "done here"}); code != 200 || body["status"] != "CANCELLED" {
		t.Fatalf("alice cancel over HTTP: %d %v", code, body)
	}
	if code, body := s.call("POST", "/v1/runs/"+runID+":cancel", adminKey, nil); code != http.StatusConflict || body["error"].(map[string]any)["status"] != "CANCELLED" {
		t.Fatalf("cancel of a cancelled run: %d %v", code, body)
	}
}
