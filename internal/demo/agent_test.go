package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/agent"
)

// fakePlatform speaks the agent-facing side of the tool-call contract and
// the LLM proxy, just enough to drive the demo agent: server tools are
// really POSTed to the demo's tool listener; transfers over 100 wait for an
// approval that the test decides; client.now answers what clientNow says.
type fakePlatform struct {
	toolsURL  string
	approve   bool
	clientNow func() (status string, body map[string]any)

	mu    sync.Mutex
	calls map[string]string // tool_call_id → tool name
	args  map[string]json.RawMessage
	seen  []string // "tool args" of each invoke
}

func (p *fakePlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer ak_demo" || r.Header.Get("x-run-id") != "run_1" {
		writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]any{"code": "forbidden", "message": "bad attribution"}})
		return
	}
	switch {
	case r.URL.Path == "/v1/chat/completions":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"delta":{"content":"Hello from "}}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"delta":{"content":"the model"}}]}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	case strings.HasPrefix(r.URL.Path, "/v1/tools/") && strings.HasSuffix(r.URL.Path, ":invoke"):
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/tools/"), ":invoke")
		var body struct {
			RunID          string          `json:"run_id"`
			Args           json.RawMessage `json:"args"`
			IdempotencyKey string          `json:"idempotency_key"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		p.mu.Lock()
		id := fmt.Sprintf("tc_%d", len(p.calls)+1)
		p.calls[id], p.args[id] = name, body.Args
		p.seen = append(p.seen, name+" "+string(body.Args))
		p.mu.Unlock()
		switch name {
		case ToolWeather:
			writeJSON(w, http.StatusOK, p.runServerTool(id, name, "/weather", body.Args))
		case ToolTransfer:
			var a struct{ Amount float64 }
			json.Unmarshal(body.Args, &a)
			if a.Amount <= 0 {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "invalid_args", "message": "amount: must be > 0"}})
				return
			}
			if a.Amount > TransferApprovalThreshold {
				writeJSON(w, http.StatusOK, map[string]any{"tool_call_id": id, "tool_name": name, "status": "pending", "state": "WAITING_APPROVAL", "approval_id": "ap_1"})
				return
			}
			writeJSON(w, http.StatusOK, p.runServerTool(id, name, "/transfer", body.Args))
		case ToolNow:
			writeJSON(w, http.StatusOK, map[string]any{"tool_call_id": id, "tool_name": name, "status": "pending", "state": "WAITING_CLIENT"})
		default:
			writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": "tool_not_found", "message": name}})
		}
	case strings.HasPrefix(r.URL.Path, "/v1/tool_calls/") && strings.HasSuffix(r.URL.Path, ":wait"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/tool_calls/"), ":wait")
		p.mu.Lock()
		name, args := p.calls[id], p.args[id]
		p.mu.Unlock()
		switch name {
		case ToolTransfer:
			if p.approve {
				writeJSON(w, http.StatusOK, p.runServerTool(id, name, "/transfer", args))
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"tool_call_id": id, "tool_name": name, "status": "failed", "state": "REJECTED", "approval_id": "ap_1",
				"error": map[string]any{"code": "rejected", "message": "rejected by alice"}})
		case ToolNow:
			status, v := p.clientNow()
			v["tool_call_id"], v["tool_name"], v["status"] = id, name, status
			writeJSON(w, http.StatusOK, v)
		}
	default:
		http.NotFound(w, r)
	}
}

// runServerTool POSTs the call to the demo's tool listener as the platform
// does and returns the tool-call view.
func (p *fakePlatform) runServerTool(id, name, path string, args json.RawMessage) map[string]any {
	body, _ := json.Marshal(map[string]any{"tool_call_id": id, "run_id": "run_1", "tool_name": name, "args": args})
	req, _ := http.NewRequest(http.MethodPost, p.toolsURL+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return map[string]any{"tool_call_id": id, "status": "failed", "state": "FAILED", "error": map[string]any{"code": "tool_unreachable", "message": err.Error()}}
	}
	defer resp.Body.Close()
	var res any
	json.NewDecoder(resp.Body).Decode(&res)
	if resp.StatusCode != http.StatusOK {
		return map[string]any{"tool_call_id": id, "status": "failed", "state": "FAILED", "error": map[string]any{"code": "tool_http_error", "message": fmt.Sprint(res)}}
	}
	return map[string]any{"tool_call_id": id, "tool_name": name, "status": "succeeded", "state": "SUCCEEDED", "result": res}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

type sseEvent struct {
	name string
	data map[string]any
}

// startDemo serves the demo agent against p.
func startDemo(t *testing.T, p *fakePlatform) *Agent {
	t.Helper()
	a, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	p.toolsURL = a.ToolsURL
	p.calls, p.args = map[string]string{}, map[string]json.RawMessage{}
	if p.clientNow == nil {
		p.clientNow = func() (string, map[string]any) {
			return "succeeded", map[string]any{"state": "SUCCEEDED", "result": map[string]any{"local": "14:05", "time_zone": "Europe/Paris"}}
		}
	}
	platform := httptest.NewServer(p)
	t.Cleanup(platform.Close)
	a.Serve(platform.URL, "ak_demo", "demo-llm")
	t.Cleanup(func() { a.Stop(context.Background()) })
	return a
}

// chat invokes the demo agent as the platform would and returns the stream.
func chat(t *testing.T, a *Agent, text string) []sseEvent {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"agent_id": AgentID, "session_id": "ses_1", "run_id": "run_1",
		"input_message": map[string]any{"role": "user", "content": text},
		"messages":      []any{map[string]any{"role": "user", "content": text}},
		"context":       map[string]any{"user_id": "u1"},
	})
	resp, err := http.Post(a.URL+"/invoke", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []sseEvent
	rd := agent.NewSSEReader(resp.Body, 0)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &data); err != nil {
			t.Fatalf("event %s: %v", ev.Event, err)
		}
		out = append(out, sseEvent{ev.Event, data})
	}
}

// text joins the deltas; states lists the state events' states.
func text(evs []sseEvent) (deltas string, states []string, last string) {
	for _, e := range evs {
		switch e.name {
		case "delta":
			deltas += fmt.Sprint(e.data["text"])
		case "state":
			states = append(states, fmt.Sprint(e.data["state"]))
		}
		last = e.name
	}
	return deltas, states, last
}

func TestDemoAgentRoutesToTools(t *testing.T) {
	p := &fakePlatform{}
	a := startDemo(t, p)
	tests := []struct {
		msg    string
		states []string
		says   []string
	}{
		{"What's the weather in Oslo?", []string{"calling_tool"}, []string{"The weather in Oslo:", "°C", "made-up"}},
		{"what time is it?", []string{"calling_tool", "waiting_for_tool"}, []string{"14:05", "Europe/Paris"}},
		{"send 50 to Bob", []string{"calling_tool"}, []string{"sent 50 to Bob", "tr_0001"}},
		{"send 250 to Bob", []string{"calling_tool", "waiting_for_tool"}, []string{"need a human's approval", "transfer of 250 to Bob was rejected", `"rejected"`, "rejected by alice"}},
		{"send 0 to Bob", []string{"calling_tool"}, []string{"refused", "invalid_args"}},
		{"hello", []string{"thinking"}, []string{"Hello from the model"}},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			deltas, states, last := text(chat(t, a, tt.msg))
			t.Logf("%q → %q", tt.msg, deltas)
			if last != "done" {
				t.Errorf("stream ended with %q, want done (a tool failure is explained, not fatal)", last)
			}
			if strings.Join(states, ",") != strings.Join(tt.states, ",") {
				t.Errorf("states %v, want %v", states, tt.states)
			}
			for _, s := range tt.says {
				if !strings.Contains(deltas, s) {
					t.Errorf("answer %q lacks %q", deltas, s)
				}
			}
		})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	want := []string{`demo.weather {"city":"Oslo"}`, `client.now {}`, `demo.transfer {"amount":50,"to":"Bob"}`, `demo.transfer {"amount":250,"to":"Bob"}`, `demo.transfer {"amount":0,"to":"Bob"}`}
	if strings.Join(p.seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("invokes:\n%s\nwant:\n%s", strings.Join(p.seen, "\n"), strings.Join(want, "\n"))
	}
}

func TestDemoAgentApprovedTransferAndOfflineBrowser(t *testing.T) {
	p := &fakePlatform{approve: true, clientNow: func() (string, map[string]any) {
		return "failed", map[string]any{"state": "FAILED", "error": map[string]any{"code": "client_offline", "message": "no connection for the session"}}
	}}
	a := startDemo(t, p)
	deltas, _, last := text(chat(t, a, "transfer 500 to Alice"))
	if last != "done" || !strings.Contains(deltas, "sent 500 to Alice") {
		t.Errorf("approved transfer: %q (%s)", deltas, last)
	}
	deltas, _, last = text(chat(t, a, "what time is it"))
	if last != "done" || !strings.Contains(deltas, "browser to be connected") || !strings.Contains(deltas, "client_offline") {
		t.Errorf("offline browser: %q (%s)", deltas, last)
	}
}

// The chat page's client.now answer (internal/console/static/chat.js) reads well.
func TestDescribeConsoleClockAnswer(t *testing.T) {
	res := json.RawMessage(`{"iso":"2026-11-22T11:42:04.123+01:00","epoch_ms":1795344124123,"time_zone":"Europe/Paris","utc_offset_minutes":60,"locale":"fr-FR"}`)
	got := describeResult(route{Tool: ToolNow}, res)
	if want := "Your browser says it is 11:42 on Sunday 22 November 2026 (Europe/Paris)."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := describeResult(route{Tool: ToolNow}, json.RawMessage(`[1]`)); got != "Your browser answered: [1]" {
		t.Errorf("unknown shape: %q", got)
	}
}
