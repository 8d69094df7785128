package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/tool"
)

// callTool POSTs a tool call to the demo's tool listener as the platform
// does (contract: Idempotency-Key = tool_call_id) and returns status and body.
func postTool(t *testing.T, baseURL, path, key string, args any) (int, map[string]any) {
	t.Helper()
	a, _ := json.Marshal(args)
	body, _ := json.Marshal(map[string]any{"tool_call_id": key, "run_id": "run_1", "tool_name": "x", "args": json.RawMessage(a)})
	req, _ := http.NewRequest(http.MethodPost, baseURL+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: answer is not JSON: %v", path, err)
	}
	return resp.StatusCode, out
}

func startToolServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(newToolServer())
	t.Cleanup(srv.Close)
	return srv
}

func TestWeatherIsDeterministic(t *testing.T) {
	srv := startToolServer(t)
	_, a := postTool(t, srv.URL, "/weather", "tc_1", map[string]any{"city": "Oslo"})
	_, b := postTool(t, srv.URL, "/weather", "tc_2", map[string]any{"city": "oslo"})
	delete(a, "city")
	delete(b, "city")
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("Oslo %v, oslo %v: the same city must get the same weather", a, b)
	}
	for _, k := range []string{"temp_c", "conditions", "humidity_pct", "wind_kph"} {
		if _, ok := a[k]; !ok {
			t.Errorf("weather lacks %s: %v", k, a)
		}
	}
	if status, out := postTool(t, srv.URL, "/weather", "tc_3", map[string]any{"city": ""}); status != http.StatusBadRequest || out["error"] == nil {
		t.Errorf("empty city: %d %v, want 400", status, out)
	}
}

func TestTransferHonoursIdempotencyKey(t *testing.T) {
	srv := startToolServer(t)
	args := map[string]any{"amount": 250, "to": "Bob"}
	_, first := postTool(t, srv.URL, "/transfer", "tc_1", args)
	if first["status"] != "sent" || first["to"] != "Bob" || first["amount"] != 250.0 {
		t.Fatalf("transfer = %v", first)
	}
	// The platform retrying the same call gets the first answer: one transfer.
	_, again := postTool(t, srv.URL, "/transfer", "tc_1", args)
	if again["transfer_id"] != first["transfer_id"] {
		t.Errorf("retry made transfer %v, first was %v", again["transfer_id"], first["transfer_id"])
	}
	// Another call is another transfer, even with the same args.
	_, other := postTool(t, srv.URL, "/transfer", "tc_2", args)
	if other["transfer_id"] == first["transfer_id"] {
		t.Errorf("a new key replayed transfer %v", other["transfer_id"])
	}
	// A key is per endpoint: the weather answer of tc_1 is not a transfer.
	if _, w := postTool(t, srv.URL, "/weather", "tc_1", map[string]any{"city": "Oslo"}); w["transfer_id"] != nil {
		t.Errorf("weather replayed a transfer: %v", w)
	}
	// A refusal is remembered too.
	if status, _ := postTool(t, srv.URL, "/transfer", "tc_3", map[string]any{"amount": -1, "to": "Bob"}); status != http.StatusBadRequest {
		t.Errorf("negative amount: %d", status)
	}
	if status, _ := postTool(t, srv.URL, "/transfer", "tc_3", args); status != http.StatusBadRequest {
		t.Errorf("retried refused call: %d, want the recorded 400", status)
	}
}

func TestTransferConcurrentRetriesMakeOneTransfer(t *testing.T) {
	srv := startToolServer(t)
	ids := make(chan any, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, out := postTool(t, srv.URL, "/transfer", "tc_same", map[string]any{"amount": 5, "to": "Bob"})
			ids <- out["transfer_id"]
		}()
	}
	wg.Wait()
	close(ids)
	first := <-ids
	for id := range ids {
		if id != first {
			t.Fatalf("transfer ids %v and %v for one key", first, id)
		}
	}
}

func TestIdempotencyCacheIsBounded(t *testing.T) {
	ts := newToolServer()
	srv := httptest.NewServer(ts)
	t.Cleanup(srv.Close)
	for i := range maxCachedAnswers + 10 {
		postTool(t, srv.URL, "/weather", fmt.Sprintf("tc_%d", i), map[string]any{"city": "Oslo"})
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.answers) != maxCachedAnswers || len(ts.order) != maxCachedAnswers {
		t.Errorf("cache holds %d answers (%d keys), want %d", len(ts.answers), len(ts.order), maxCachedAnswers)
	}
}

func TestToolServerRefusesOtherMethodsAndBodies(t *testing.T) {
	srv := startToolServer(t)
	resp, err := http.Get(srv.URL + "/weather")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /weather: %d", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/transfer", "application/json", strings.NewReader("nope"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("non-JSON body: %d", resp.StatusCode)
	}
}

// TestRegisterTools checks what an operator's PUTs carry, and that the
// platform's own compiler accepts it with the intended policy.
func TestRegisterTools(t *testing.T) {
	var mu sync.Mutex
	got := map[string]json.RawMessage{}
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin_1" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/v1/tools/")
		if r.Method != http.MethodPut || !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[name] = b
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	}))
	t.Cleanup(platform.Close)

	if err := RegisterTools(context.Background(), platform.URL, "admin_1", "http://127.0.0.1:9/"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("registered %d tools, want 3", len(got))
	}
	compiled := map[string]*tool.Tool{}
	for name, raw := range got {
		var def tool.Definition
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&def); err != nil {
			t.Fatalf("%s: %s: %v", name, raw, err)
		}
		def.Name = name
		tl, err := tool.Compile(def)
		if err != nil {
			t.Fatalf("%s does not compile: %v", name, err)
		}
		if tl.Def.OnFailure != tool.OnFailureReturnToAgent {
			t.Errorf("%s: on_failure = %q, want return_to_agent", name, tl.Def.OnFailure)
		}
		compiled[name] = tl
	}
	if w := compiled[ToolWeather].Def; w.Kind != tool.KindServer || w.Endpoint != "http://127.0.0.1:9/weather" {
		t.Errorf("weather: %+v", w)
	}
	if n := compiled[ToolNow].Def; n.Kind != tool.KindClient || n.Endpoint != "" {
		t.Errorf("client.now: %+v", n)
	}
	tr := compiled[ToolTransfer]
	if tr.Def.Endpoint != "http://127.0.0.1:9/transfer" {
		t.Errorf("transfer endpoint %q", tr.Def.Endpoint)
	}
	for _, c := range []struct {
		args     string
		decision string
	}{{`{"amount": 50, "to": "bob"}`, tool.DecisionAllow}, {`{"amount": 100, "to": "bob"}`, tool.DecisionAllow}, {`{"amount": 100.5, "to": "bob"}`, tool.DecisionRequireApproval}} {
		raw := json.RawMessage(c.args)
		if err := tr.ValidateArgs(raw); err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		args, _ := tool.DecodeArgs(raw)
		d, err := tr.Decide(tool.Input{Args: args, AgentID: AgentID})
		if err != nil || d.Decision != c.decision {
			t.Errorf("%s: decision %+v (%v), want %s", c.args, d, err, c.decision)
		}
		if c.decision == tool.DecisionRequireApproval && d.Rule != TransferApprovalRule {
			t.Errorf("%s: rule %q, want %q", c.args, d.Rule, TransferApprovalRule)
		}
	}
	for _, bad := range []string{`{"amount": 0, "to": "bob"}`, `{"amount": 5}`, `{"amount": 5, "to": ""}`} {
		if err := tr.ValidateArgs(json.RawMessage(bad)); err == nil {
			t.Errorf("transfer accepts %s", bad)
		}
	}

	if err := RegisterTools(context.Background(), platform.URL, "wrong", "http://127.0.0.1:9"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong admin key: err = %v, want the 401", err)
	}
}
