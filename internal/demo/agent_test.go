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
	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/tool"
)

// fakePlatform speaks the agent-facing side of the tool-call contract and
// the LLM proxy, just enough to drive the demo agent: GET /v1/tools lists
// the demo's tools as the platform does; chat completions are answered by
// the real fake upstream (internal/fakellm); server tools are really POSTed
// to the demo's tool listener; transfers over 100 wait for an approval that
// the test decides; client.now answers what clientNow says.
type fakePlatform struct {
	toolsURL  string
	approve   bool
	clientNow func() (status string, body map[string]any)
	llm       *fakellm.Server // the model behind the "proxy"
	chat      http.Handler    // answers chat completions instead of llm, if set

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
	case r.URL.Path == "/v1/chat/completions" && p.chat != nil:
		p.chat.ServeHTTP(w, r)
	case r.URL.Path == "/v1/chat/completions":
		p.llm.ServeHTTP(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/tools":
		if r.URL.Query().Get("run_id") != "run_1" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "invalid_request", "message": "run_id"}})
			return
		}
		var list []any
		for name, def := range toolDefinitions(p.toolsURL) {
			d, _ := json.Marshal(def)
			var td tool.Definition
			json.Unmarshal(d, &td)
			td.Name = name
			tl, err := tool.Compile(td)
			if err != nil {
				panic(err)
			}
			list = append(list, tl.OpenAISchema())
		}
		writeJSON(w, http.StatusOK, map[string]any{"tools": list})
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
	p.llm = fakellm.New(fakellm.Options{Models: []string{"demo-llm"}, Capture: true})
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

// Every message goes through the model; the model's function call picks
// the tool; its result goes back to the model, whose answer is streamed.
func TestDemoAgentCallsToolsTheModelPicks(t *testing.T) {
	p := &fakePlatform{}
	a := startDemo(t, p)
	tests := []struct {
		msg    string
		states []string
		says   []string
	}{
		{"What's the weather in Oslo?", []string{"thinking", "calling_tool", "thinking"}, []string{"Tool result: city: Oslo", "temp_c:", "made-up"}},
		{"what time is it?", []string{"thinking", "calling_tool", "waiting_for_tool", "thinking"}, []string{"local: 14:05", "time_zone: Europe/Paris"}},
		{"send 50 to Bob", []string{"thinking", "calling_tool", "thinking"}, []string{"amount: 50", "to: Bob", "transfer_id: tr_0001", "status: sent"}},
		{"send 250 to Bob", []string{"thinking", "calling_tool", "waiting_for_tool", "thinking"}, []string{"need", "approval", "error.code: rejected", "rejected by alice"}},
		{"send 0 to Bob", []string{"thinking", "calling_tool", "thinking"}, []string{"error.code: invalid_args", "amount: must be > 0"}},
		{"hello", []string{"thinking"}, []string{"You said: hello"}},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			evs := chat(t, a, tt.msg)
			deltas, states, last := text(evs)
			t.Logf("%q → %q", tt.msg, deltas)
			if last != "done" {
				t.Errorf("stream ended with %q, want done (a tool failure is the model's to explain, not fatal)", last)
			}
			if strings.Join(states, ",") != strings.Join(tt.states, ",") {
				t.Errorf("states %v, want %v", states, tt.states)
			}
			for _, s := range tt.says {
				if !strings.Contains(deltas, s) {
					t.Errorf("answer %q lacks %q", deltas, s)
				}
			}
			usage, _ := evs[len(evs)-1].data["usage"].(map[string]any)
			if calls, _ := usage["llm_calls"].(float64); int(calls) != (len(tt.states)+1)/2 || usage["total_tokens"] == nil {
				t.Errorf("done usage %v", usage)
			}
		})
	}
	p.mu.Lock()
	want := []string{`demo.weather {"city":"Oslo"}`, `client.now {}`, `demo.transfer {"amount":50,"to":"Bob"}`, `demo.transfer {"amount":250,"to":"Bob"}`, `demo.transfer {"amount":0,"to":"Bob"}`}
	if strings.Join(p.seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("invokes:\n%s\nwant:\n%s", strings.Join(p.seen, "\n"), strings.Join(want, "\n"))
	}
	p.mu.Unlock()

	// The second model call of a tool round carries the OpenAI shape: the
	// tools, the assistant's tool call and the tool message answering it.
	reqs := p.llm.Requests()
	var second struct {
		Model    string           `json:"model"`
		Tools    []map[string]any `json:"tools"`
		Messages []struct {
			Role       string            `json:"role"`
			ToolCallID string            `json:"tool_call_id"`
			ToolCalls  []json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1].Body, &second); err != nil {
		t.Fatal(err)
	}
	n := len(second.Messages)
	if second.Model != "demo-llm" || len(second.Tools) != 3 || n < 3 || second.Messages[n-2].Role != "assistant" || len(second.Messages[n-2].ToolCalls) != 1 ||
		second.Messages[n-1].Role != "tool" || second.Messages[n-1].ToolCallID == "" {
		t.Errorf("second model call: %s", reqs[1].Body)
	}
}

func TestDemoAgentApprovedTransferAndOfflineBrowser(t *testing.T) {
	p := &fakePlatform{approve: true, clientNow: func() (string, map[string]any) {
		return "failed", map[string]any{"state": "FAILED", "error": map[string]any{"code": "client_offline", "message": "no connection for the session"}}
	}}
	a := startDemo(t, p)
	deltas, _, last := text(chat(t, a, "transfer 500 to Alice"))
	if last != "done" || !strings.Contains(deltas, "amount: 500") || !strings.Contains(deltas, "to: Alice") || !strings.Contains(deltas, "status: sent") {
		t.Errorf("approved transfer: %q (%s)", deltas, last)
	}
	deltas, _, last = text(chat(t, a, "what time is it"))
	if last != "done" || !strings.Contains(deltas, "error.code: client_offline") {
		t.Errorf("offline browser: %q (%s)", deltas, last)
	}
}

// A model that never stops calling tools is asked for its answer without
// them after maxToolRounds.
func TestDemoAgentBoundsToolRounds(t *testing.T) {
	p := &fakePlatform{}
	p.chat = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tools []any `json:"tools"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "text/event-stream")
		if len(req.Tools) == 0 {
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"enough"},"finish_reason":null}]}`+"\n\ndata: [DONE]\n\n")
			return
		}
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"demo__weather","arguments":""}}]},"finish_reason":null}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":null}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`+"\n\ndata: [DONE]\n\n")
	})
	a := startDemo(t, p)
	deltas, states, last := text(chat(t, a, "weather in Oslo"))
	if last != "done" || deltas != "enough" {
		t.Fatalf("ended with %s: %q", last, deltas)
	}
	if calls := strings.Count(strings.Join(states, ","), "calling_tool"); calls != maxToolRounds {
		t.Errorf("%d tool calls, want %d (states %v)", calls, maxToolRounds, states)
	}
}
