package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/testdb"
)

// oddAgent streams a delta and state details that PostgreSQL's jsonb and
// text refused (issue 8, item 1): a NUL in a delta and in a detail, a lone
// surrogate and a number beyond jsonb's range.
func oddAgent(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`event: delta` + "\n" + `data: {"text":"a\u0000b"}`,
			`event: state` + "\n" + `data: {"state":"thinking","detail":"\u0000"}`,
			`event: state` + "\n" + `data: {"state":"odd","detail":{"n":1e999999,"s":"\ud800"}}`,
			`event: delta` + "\n" + `data: {"text":"c"}`,
			`event: done` + "\n" + `data: {"usage":{"words":2}}`,
		} {
			fmt.Fprint(w, ev+"\n\n")
			http.NewResponseController(w).Flush()
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// decodeNumbers decodes JSON keeping numbers as text (1e999999 does not
// fit a float64).
func decodeNumbers(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	if n, ok := m["seq"].(json.Number); ok { // as the harness reads it
		m["seq"], _ = n.Float64()
	}
	return m
}

// A user message with U+0000, an agent delta "a\u0000b", state details
// with "\u0000", a lone surrogate and 1e999999: on both stores every one
// reaches the WebSocket client and the event log, and the run ends DONE.
func TestOddTextReachesClientAndLogOnBothStores(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		s.register("odd", oddAgent(t))
		c := dial(t, s, "alice", "alice-key")
		c.sendRaw([]byte(`{"type":"agent_invoke","request_id":"r1","agent_id":"odd","message":{"role":"user","content":"hi\u0000there"}}`))
		var msgs []map[string]any
		var raw [][]byte
		for {
			c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, data, err := c.conn.ReadMessage()
			if err != nil {
				t.Fatalf("read after %d messages: %v\n%s", len(msgs), err, s.output())
			}
			m := decodeNumbers(t, data)
			msgs, raw = append(msgs, m), append(raw, data)
			if isEnd(m) {
				break
			}
		}
		var types []string
		for _, m := range msgs {
			types = append(types, m["type"].(string))
		}
		if strings.Join(types, ",") != "run_started,delta,state,state,delta,done" {
			t.Fatalf("client got %v:\n%q", types, raw)
		}
		assertIncreasingSeqs(t, msgs)
		if msgs[1]["text"] != "a\x00b" || msgs[2]["detail"] != "\x00" || msgs[4]["text"] != "c" {
			t.Fatalf("client got delta %q, detail %q, delta %q", msgs[1]["text"], msgs[2]["detail"], msgs[4]["text"])
		}
		if !bytes.Contains(raw[3], []byte(`1e999999`)) || !bytes.Contains(raw[3], []byte(`\ud800`)) {
			t.Fatalf("state detail with a huge number and a lone surrogate reached the client as %s", raw[3])
		}
		if msg, _ := msgs[0]["message"].(map[string]any); msg["content"] != "hi\x00there" {
			t.Fatalf("run_started carries message %v", msgs[0]["message"])
		}
		runID, sid := msgs[0]["run_id"].(string), msgs[0]["session_id"].(string)
		if code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil); code != 200 || run["status"] != "DONE" {
			t.Fatalf("run: %d %v", code, run)
		}

		// The log has all of it.
		body := rawGet(t, s, "/v1/sessions/"+sid+"/events", adminKey)
		if !bytes.Contains(body, []byte(`1e999999`)) || !bytes.Contains(body, []byte(`\ud800`)) {
			t.Fatalf("events lack the huge number or the lone surrogate: %s", body)
		}
		evs, _ := decodeNumbers(t, body)["events"].([]any)
		got := map[string]int{}
		for _, e := range evs {
			e := e.(map[string]any)
			p := e["payload"].(map[string]any)
			switch e["type"] {
			case "user_input":
				if p["message"].(map[string]any)["content"] == "hi\x00there" {
					got["user_input"]++
				}
			case "agent_stream_delta":
				if p["text"] == "a\x00b" {
					got["delta"]++
				}
			case "state":
				if p["detail"] == "\x00" {
					got["state"]++
				}
			case "run_done":
				got["run_done"]++
			}
		}
		if got["user_input"] != 1 || got["delta"] != 1 || got["state"] != 1 || got["run_done"] != 1 {
			t.Fatalf("events in the log: %v\n%s", got, body)
		}
		// And the transcript.
		code, tr := s.call("GET", "/v1/sessions/"+sid+"/messages", adminKey, nil)
		if code != 200 {
			t.Fatalf("messages: %d %v", code, tr)
		}
		contents := []string{}
		for _, m := range tr["messages"].([]any) {
			contents = append(contents, m.(map[string]any)["content"].(string))
		}
		if strings.Join(contents, "|") != "hi\x00there|a\x00bc" {
			t.Fatalf("transcript %q", contents)
		}
	})
}

func rawGet(t *testing.T, s *server, path, key string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return b
}

// When the database cannot be reached, HTTP answers 503 store_unavailable
// with Retry-After and WebSocket commands get the same code — not 500
// internal — and everything works again once it is back (issue 8, item 11).
func TestStoreUnavailableAnswers503(t *testing.T) {
	proxy, dsn := testdb.PostgresProxy(t, testdb.DSN(t, "postgres"))
	s := startServer(t, dsn, "--db-max-conns", "3")
	key := s.register("a1", "http://127.0.0.1:9")
	c := dial(t, s, "alice", "alice-key")
	proxy.Cut()
	for _, r := range []struct{ method, path, key string }{
		{"GET", "/v1/runs/run_x", adminKey},
		{"GET", "/v1/sessions/ses_x/events", adminKey},
		{"GET", "/v1/agents", adminKey},
		{"POST", "/v1/agents/register", adminKey},
		{"GET", "/v1/sessions/ses_x/messages", key}, // an agent key is looked up in the store
		{"POST", "/v1/chat/completions", key},       // the LLM proxy renders its own errors
	} {
		var body io.Reader
		switch r.path {
		case "/v1/agents/register":
			body = strings.NewReader(`{"agent_id":"a2","endpoint":"http://127.0.0.1:9"}`)
		case "/v1/chat/completions":
			body = strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		}
		req, _ := http.NewRequest(r.method, s.URL+r.path, body)
		req.Header.Set("Authorization", "Bearer "+r.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(b, &e)
		if resp.StatusCode != 503 || e.Error.Code != "store_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s with the database down: %d Retry-After %q %s", r.method, r.path, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a1", "message": map[string]any{"role": "user", "content": "hi"}})
	if m := c.next(); m["type"] != "error" || m["code"] != "store_unavailable" || m["request_id"] != "r1" {
		t.Errorf("agent_invoke with the database down answered %v", m)
	}
	if code, _ := s.call("GET", "/readyz", "", nil); code != 503 {
		t.Errorf("readyz with the database down: %d", code)
	}
	proxy.Restore()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := s.call("GET", "/v1/runs/run_x", adminKey, nil)
		if code == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the database came back: %d %v", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(s.output(), `"level":"ERROR","msg":"request failed"`) {
		t.Errorf("store outages logged as internal errors:\n%s", s.output())
	}
}
