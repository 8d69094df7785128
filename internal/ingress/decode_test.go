package ingress

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/store"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, seed := range []string{
		`{"type":"agent_invoke","request_id":"r","agent_id":"a","message":{"role":"user","content":"hi"}}`,
		`{"type":"agent_invoke","agent_id":"a","message":{"content":5}}`,
		`{"type":"subscribe","session_id":"s","after_seq":3}`,
		`{"type":"subscribe","session_id":"s","after_seq":-3}`,
		`{"type":"subscribe","session_id":"s","after_seq":1e400}`,
		`{"type":"cancel_run","run_id":"r"}`,
		`{"type":"hello","user_id":"u","api_key":"k"}`,
		`{"type":null}`, `[]`, `""`, `{`, `{"type":"x","message":"\ud800"}`, "\x00", `{"type":"agent_invoke","message":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, bad := decodeCommand(data)
		if (cmd == nil) == (bad == nil) {
			t.Fatalf("want exactly one of command/error, got %v %v", cmd, bad)
		}
		if bad != nil {
			if bad.Type != "error" || bad.Code == "" || bad.Message == "" {
				t.Fatalf("error reply without code/message: %+v", bad)
			}
			if _, err := json.Marshal(bad); err != nil {
				t.Fatalf("error reply does not encode: %v", err)
			}
			return
		}
		switch cmd.Type {
		case "agent_invoke":
			if cmd.AgentID == "" || cmd.Content == "" {
				t.Fatalf("invalid invoke accepted: %+v", cmd)
			}
		case "subscribe":
			if cmd.SessionID == "" || cmd.AfterSeq < 0 {
				t.Fatalf("invalid subscribe accepted: %+v", cmd)
			}
		case "cancel_run":
			if cmd.RunID == "" {
				t.Fatalf("invalid cancel accepted: %+v", cmd)
			}
		default:
			t.Fatalf("unknown type accepted: %q", cmd.Type)
		}
		decodeHello(data) // must not panic either
	})
}

// FuzzClientMessage: whatever JSON object an event carries, the client
// message is valid JSON with the envelope fields intact.
func FuzzClientMessage(f *testing.F) {
	for _, p := range []string{`{}`, `{"text":"hi"}`, ` { "text" : "a\"b" } `, `{"state":"X","detail":{"a":[1,2]}}`, `{"code":"x","message":"y"}`} {
		f.Add(p, "ses_1", int64(7))
	}
	f.Fuzz(func(t *testing.T, payload, sessionID string, seq int64) {
		var obj map[string]any
		if json.Unmarshal([]byte(payload), &obj) != nil {
			return // the log stores only JSON objects
		}
		for k := range obj {
			if envelope[k] {
				return // payloads never carry envelope keys
			}
		}
		e := &store.Event{EventID: "evt_1", SessionID: sessionID, Seq: seq, RunID: "run_1", TS: 5, Type: "agent_stream_delta", Payload: json.RawMessage(payload)}
		b := ClientMessage(e)
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("client message is not JSON: %v\n%s", err, b)
		}
		var wantSession string
		q, _ := json.Marshal(sessionID)
		json.Unmarshal(q, &wantSession)
		seqOK := seq > 1<<53 || seq < -(1<<53) || int64(got["seq"].(float64)) == seq
		if got["type"] != "delta" || got["session_id"] != wantSession || got["event_id"] != "evt_1" || !seqOK {
			t.Fatalf("envelope lost: %v", got)
		}
		for k, v := range obj {
			gv, _ := json.Marshal(got[k])
			wv, _ := json.Marshal(v)
			if string(gv) != string(wv) {
				t.Fatalf("payload field %s: got %s want %s", k, gv, wv)
			}
		}
	})
}

var envelope = map[string]bool{"type": true, "session_id": true, "seq": true, "event_id": true, "ts": true, "run_id": true, "parent_run_id": true}

func TestClientMessageSkipsInternalEvents(t *testing.T) {
	for _, typ := range []string{"user_input", "agent_invoke_started", "agent_invoke_done", "llm_call_done"} {
		if b := ClientMessage(&store.Event{Type: typ, Payload: json.RawMessage(`{}`)}); b != nil {
			t.Fatalf("%s sent to clients: %s", typ, b)
		}
	}
	b := ClientMessage(&store.Event{Type: "run_failed", SessionID: "s", Seq: 3, EventID: "e", RunID: "r", Payload: json.RawMessage(`{"code":"agent_timeout","message":"m"}`)})
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["type"] != "error" || m["code"] != "agent_timeout" || m["parent_run_id"] != nil {
		t.Fatalf("run_failed → %s (%v)", b, err)
	}
}

// A child run's clients get the sub_agent_* events in place of its start,
// deltas and end, and its states, tool requests and approvals as a root
// run's, each with the child's run_id and parent_run_id (DESIGN §11).
func TestClientMessageOfChildRuns(t *testing.T) {
	child := func(typ, payload string) *store.Event {
		return &store.Event{Type: typ, SessionID: "s", Seq: 9, EventID: "e", RunID: "run_c", ParentRunID: "run_p", Payload: json.RawMessage(payload)}
	}
	for _, typ := range []string{"run_started", "agent_stream_delta", "run_done", "run_failed", "run_cancelled", "agent_called_child"} {
		if b := ClientMessage(child(typ, `{"text":"x"}`)); b != nil {
			t.Errorf("child %s sent to clients: %s", typ, b)
		}
	}
	for typ, want := range map[string]string{
		"sub_agent_call_start": "sub_agent_call_start", "sub_agent_partial": "sub_agent_partial",
		"sub_agent_complete": "sub_agent_complete", "sub_agent_error": "sub_agent_error",
		"state": "state", "tool_request": "tool_request", "approval_created": "approval_required",
	} {
		b := ClientMessage(child(typ, `{"text":"hi"}`))
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || m["type"] != want || m["run_id"] != "run_c" || m["parent_run_id"] != "run_p" || m["seq"] != float64(9) || m["text"] != "hi" {
			t.Errorf("child %s → %s (%v)", typ, b, err)
		}
	}
	// A root run's deltas and end are unchanged.
	for typ, want := range map[string]string{"agent_stream_delta": "delta", "run_done": "done", "run_started": "run_started"} {
		var m map[string]any
		if err := json.Unmarshal(ClientMessage(&store.Event{Type: typ, RunID: "r", Payload: json.RawMessage(`{}`)}), &m); err != nil || m["type"] != want {
			t.Errorf("root %s → %v (%v)", typ, m, err)
		}
	}
}

// TestClientMessageOneAllocation: a message is built in the buffer it
// starts with, even with the longest envelope (a child run's event, the
// largest seq and ts) — one allocation per delivered event (issue 13).
func TestClientMessageOneAllocation(t *testing.T) {
	e := &store.Event{Type: "sub_agent_partial", SessionID: "ses_019ac4e3-7b1f-7c2e-9d4a-5f6e7d8c9b0a", Seq: math.MaxInt64,
		EventID: "evt_019ac4e3-7b1f-7c2e-9d4a-5f6e7d8c9b0b", TS: math.MaxInt64, RunID: "run_019ac4e3-7b1f-7c2e-9d4a-5f6e7d8c9b0c",
		ParentRunID: "run_019ac4e3-7b1f-7c2e-9d4a-5f6e7d8c9b0d", Payload: json.RawMessage(`{"text":"Sunny "}`)}
	if n := testing.AllocsPerRun(100, func() { ClientMessage(e) }); n != 1 {
		t.Fatalf("ClientMessage allocates %v times per message, want 1", n)
	}
}

// ts is informational: any JSON number is taken, fractions included (Python
// clients send time.time()*1000), on hello as on every other message; only
// a ts that is not a number is refused.
func TestDecodeTakesAnyNumberAsTS(t *testing.T) {
	for _, ts := range []string{`1795958509959.436`, `1795958509959`, `-1`, `1e400`, `null`} {
		cmd, bad := decodeCommand([]byte(`{"type":"subscribe","request_id":"r","session_id":"s","after_seq":3,"ts":` + ts + `}`))
		if bad != nil || cmd.AfterSeq != 3 {
			t.Errorf("ts %s: %+v %+v", ts, cmd, bad)
		}
		if user, key, reqID, ok := decodeHello([]byte(`{"type":"hello","request_id":"h","user_id":"u","api_key":"k","ts":` + ts + `}`)); !ok || user != "u" || key != "k" || reqID != "h" {
			t.Errorf("hello with ts %s: %q %q %q %v", ts, user, key, reqID, ok)
		}
	}
	for ts, kind := range map[string]string{`"1"`: "string", `true`: "bool", `{}`: "object", `[1]`: "array"} {
		_, bad := decodeCommand([]byte(`{"type":"subscribe","request_id":"r","session_id":"s","after_seq":3,"ts":` + ts + `}`))
		if bad == nil || bad.Code != "invalid_json" || bad.RequestID != "r" || bad.Message != "message is not a JSON object: ts: expected a number, got "+kind {
			t.Errorf("ts %s: %+v", ts, bad)
		}
	}
}

// A message refused for a field of the wrong type still names its
// request_id in the error (DESIGN §4), with the code and message it had.
func TestDecodeErrorKeepsRequestID(t *testing.T) {
	for data, want := range map[string]*reply{
		`{"type":"subscribe","request_id":"r7","session_id":"s","after_seq":"3"}`: {RequestID: "r7", Message: "message is not a JSON object: after_seq: expected an integer, got string"},
		`{"after_seq":"3","type":"subscribe","session_id":"s","request_id":"r8"}`: {RequestID: "r8", Message: "message is not a JSON object: after_seq: expected an integer, got string"},
		`{"type":"agent_invoke","request_id":"r9","agent_id":5}`:                  {RequestID: "r9", Message: "message is not a JSON object: agent_id: expected a string, got number"},
		`{"type":"subscribe","request_id":7,"session_id":"s","after_seq":"3"}`:    {RequestID: ""},
		`{"type":"subscribe","request_id":"r","session_id":"s","after_seq":3`:     {RequestID: ""},
	} {
		_, bad := decodeCommand([]byte(data))
		if bad == nil || bad.Code != "invalid_json" || bad.RequestID != want.RequestID || (want.Message != "" && bad.Message != want.Message) {
			t.Errorf("%s: %+v, want request_id %q", data, bad, want.RequestID)
		}
	}
	if _, _, reqID, ok := decodeHello([]byte(`{"type":"hello","request_id":"h1","user_id":5}`)); ok || reqID != "h1" {
		t.Errorf("hello with a numeric user_id: %q %v, want refused with request_id h1", reqID, ok)
	}
}

// Over a connection: a hello and an agent_invoke with a fractional ts are
// taken, and a subscribe whose after_seq is a string is refused with its
// request_id (the audit's Python client).
func TestFractionalTSAndRequestIDOverWebSocket(t *testing.T) {
	url := newTestServer(t, Options{})
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	read := func() map[string]any {
		t.Helper()
		var m map[string]any
		if err := c.ReadJSON(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send := func(raw string) {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"hello","request_id":"h","user_id":"u","api_key":"k","ts":1795958509959.436}`)
	if m := read(); m["type"] != "ready" || m["request_id"] != "h" {
		t.Fatalf("hello with a fractional ts: %v", m)
	}
	send(`{"type":"agent_invoke","request_id":"r1","agent_id":"nobody","message":{"role":"user","content":"hi"},"ts":1795958509959.436}`)
	if m := read(); m["type"] != "error" || m["request_id"] != "r1" || m["code"] != "agent_not_found" {
		t.Fatalf("agent_invoke with a fractional ts: %v, want it decoded (agent_not_found for r1)", m)
	}
	send(`{"type":"subscribe","request_id":"r2","session_id":"ses_x","after_seq":"3"}`)
	if m := read(); m["type"] != "error" || m["request_id"] != "r2" || m["code"] != "invalid_json" {
		t.Fatalf("subscribe with a string after_seq: %v, want invalid_json for r2", m)
	}
}

// A message cut at the size limit still names its request, when its
// request_id came before the bulk.
func TestRequestIDOfPrefix(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"agent_invoke","request_id":"r1","message":{"content":"xxxx`: "r1",
		`{"request_id":"r2","type":"x"`:                                       "r2",
		`{"message":{"request_id":"inner"},"request_id":"r3","pad":"xx`:       "r3",
		`{"message":{"content":"xxxxxxxxxx`:                                   "",
		`{"request_id":5,"x":"`:                                               "",
		`[{"request_id":"r4"}`:                                                "",
		`xx`:                                                                  "",
	} {
		if got := requestIDOfPrefix([]byte(in)); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
