package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// An agent that streams past the run's output bound: the run fails with
// output_too_large, the agent's request is closed, and the server keeps no
// more than the bound — neither in the log nor as a transcript answer.
func TestRunOutputBoundEndToEnd(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		const bound = 64 << 10
		s := startServerEnv(t, dsn, []string{fmt.Sprintf("AGENTPLANE_MAX_RUN_OUTPUT_BYTES=%d", bound)})
		closed := make(chan bool, 1)
		chunk := strings.Repeat("z", 4000)
		ag := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for sent := 0; sent < 64<<20; sent += len(chunk) { // 64 MiB unless stopped
				if _, err := fmt.Fprintf(w, "event: delta\ndata: {\"text\":%q}\n\n", chunk); err != nil || rc.Flush() != nil || r.Context().Err() != nil {
					closed <- true
					return
				}
			}
			fmt.Fprint(w, "event: done\ndata: {}\n\n")
			closed <- false
		}))
		t.Cleanup(ag.Close)
		s.register("flood", ag.URL)
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "flood", "message": map[string]any{"role": "user", "content": "go"}})
		msgs := c.untilEnd()
		end := msgs[len(msgs)-1]
		if end["type"] != "error" || end["code"] != "output_too_large" || !strings.Contains(sv(end, "message"), "AGENTPLANE_MAX_RUN_OUTPUT_BYTES") {
			t.Fatalf("run ended %v", end)
		}
		if got := len(text(msgs)); got > bound || got < bound-len(chunk) {
			t.Fatalf("client got %d bytes of output, bound %d", got, bound)
		}
		select {
		case c := <-closed:
			if !c {
				t.Fatal("the agent streamed to the end: its request was not closed")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the agent's request is still open")
		}
		runID, sid := sv(msgs[0], "run_id"), sv(msgs[0], "session_id")
		stored := 0
		for _, e := range s.events("/v1/runs/" + runID + "/events") {
			if e["type"] == "agent_stream_delta" {
				stored += len(e["payload"].(map[string]any)["text"].(string))
			}
		}
		if stored > bound {
			t.Fatalf("the log holds %d bytes of output, bound %d", stored, bound)
		}
		code, body := s.call("GET", "/v1/sessions/"+sid+"/messages", "alice-key", nil)
		if list, _ := body["messages"].([]any); code != 200 || len(list) != 1 {
			t.Fatalf("transcript after the failed run: %d %v", code, body)
		}
	})
}

// captureAgent answers every invoke with "ok" and keeps the messages[] it
// was sent.
type captureAgent struct {
	*httptest.Server
	mu   sync.Mutex
	last []map[string]any
}

func newCaptureAgent(t *testing.T) *captureAgent {
	a := &captureAgent{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []map[string]any `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		a.mu.Lock()
		a.last = body.Messages
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: delta\ndata: {\"text\":\"ok\"}\n\nevent: done\ndata: {}\n\n")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *captureAgent) messages() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, len(a.last))
	for i, m := range a.last {
		out[i], _ = m["content"].(string)
	}
	return out
}

// The transcript an agent is sent holds the newest messages within
// AGENTPLANE_MAX_TRANSCRIPT_BYTES of content; the one across the bound is
// cut with a marker (issue 8: a 400 MB answer was re-sent whole).
func TestTranscriptSentToAgentsIsBounded(t *testing.T) {
	const bound = 4096
	s := startServerEnv(t, "sqlite:"+t.TempDir()+"/a.db", nil, "--max-transcript-bytes", fmt.Sprint(bound))
	ag := newCaptureAgent(t)
	s.register("cap", ag.URL)
	c := dial(t, s, "alice", "alice-key")
	say := func(sid, content string) string {
		t.Helper()
		m := map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "cap", "message": map[string]any{"role": "user", "content": content}}
		if sid != "" {
			m["session_id"] = sid
		}
		c.send(m)
		msgs := c.untilEnd()
		if msgs[len(msgs)-1]["type"] != "done" {
			t.Fatalf("run ended %v", msgs[len(msgs)-1])
		}
		return sv(msgs[0], "session_id")
	}
	post := func(sid, content string) {
		t.Helper()
		if code, body := s.call("POST", "/v1/sessions/"+sid+"/messages", "alice-key", map[string]any{"role": "assistant", "content": content}); code != http.StatusCreated {
			t.Fatalf("post message: %d %v", code, body)
		}
	}
	sid := say("", "first")
	a, b := strings.Repeat("a", 3000), strings.Repeat("b", 1500)
	post(sid, a)
	post(sid, b)
	say(sid, "newest")
	got := ag.messages()
	total := 0
	for _, m := range got {
		total += len(m)
	}
	if len(got) != 3 || got[2] != "newest" || got[1] != b || !strings.HasPrefix(got[0], "aaa") || !strings.HasSuffix(got[0], "of 3000 bytes shown]") || total > bound {
		t.Fatalf("agent was sent %d messages, %d bytes: %.60q", len(got), total, got)
	}

	// One message larger than the whole bound is cut, not dropped with
	// everything else.
	post(sid, strings.Repeat("c", 50_000))
	say(sid, "x")
	got = ag.messages()
	if len(got) != 2 || got[1] != "x" || !strings.HasSuffix(got[0], "of 50000 bytes shown]") || len(got[0])+1 > bound {
		t.Fatalf("after a huge message the agent was sent %d messages: %.60q", len(got), got)
	}
}
