package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// TestHandleStreamsWordsAfterReadingTheTranscript serves handle as the
// platform would call it, with a fake platform answering the transcript read.
func TestHandleStreamsWordsAfterReadingTheTranscript(t *testing.T) {
	var sawRunID string
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/sessions/ses_1/messages" {
			http.Error(w, `{"error":{"code":"not_found","message":"no route"}}`, http.StatusNotFound)
			return
		}
		sawRunID = r.Header.Get("x-run-id")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"messages":[{"message_id":"m1","role":"user","content":"earlier"},{"message_id":"m2","role":"user","content":"hi"}],"next_before":""}`))
	}))
	defer platform.Close()

	agent := httptest.NewServer(&agentplane.AgentHandler{Handler: handle, Platform: agentplane.NewClient(platform.URL, "ak_echo")})
	defer agent.Close()

	body := `{"agent_id":"echo","session_id":"ses_1","run_id":"run_1","input_message":{"role":"user","content":"hi there"},"messages":[],"context":{"user_id":"u1"}}`
	resp, err := http.Post(agent.URL+"/invoke", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	var names, deltas []string
	var last string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			names = append(names, strings.TrimPrefix(line, "event: "))
		case strings.HasPrefix(line, "data: "):
			last = strings.TrimPrefix(line, "data: ")
			if names[len(names)-1] == "delta" {
				var d struct{ Text string }
				json.Unmarshal([]byte(last), &d)
				deltas = append(deltas, d.Text)
			}
		}
	}
	if names[0] != "state" || names[len(names)-1] != "done" {
		t.Fatalf("events = %v, want state … done", names)
	}
	if got, want := strings.Join(deltas, ""), "Hello u1! You said: hi there (this session has 2 messages so far)"; got != want {
		t.Fatalf("reply = %q, want %q", got, want)
	}
	if deltas[0] != "Hello" || deltas[1] != " u1!" {
		t.Errorf("deltas = %q, want one per word", deltas)
	}
	var done struct{ Usage struct{ Words int } }
	if err := json.Unmarshal([]byte(last), &done); err != nil || done.Usage.Words != len(deltas) {
		t.Errorf("done = %s, want usage.words = %d", last, len(deltas))
	}
	if sawRunID != "run_1" {
		t.Errorf("transcript read carried x-run-id %q, want run_1", sawRunID)
	}
}
