package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	apserver "github.com/agentplane/agentplane/internal/server"
	"github.com/agentplane/agentplane/internal/store"
)

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestRegistrationAuthAndSSRF(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStream, 1)

		// Keys.
		for _, key := range []string{"", "wrong", "alice-key"} {
			code, body := s.call("POST", "/v1/agents/register", key, map[string]any{"agent_id": "a1", "endpoint": ag.URL})
			want := http.StatusUnauthorized
			if key == "alice-key" {
				want = http.StatusForbidden
			}
			if code != want || errCode(body) == "" {
				t.Fatalf("register with key %q: %d %v", key, code, body)
			}
		}
		if code, _ := s.call("GET", "/v1/agents", "", nil); code != http.StatusUnauthorized {
			t.Fatalf("list agents without key: %d", code)
		}
		// Agent ids another agent could not call as call_<agent_id> are
		// refused; the rest of the alphabet is taken.
		for id, want := range map[string]int{"x__y": 400, "x_.y": 400, "x--y": 400, strings.Repeat("a", 60): 400, "x.y": 201, "x_y-z": 201, "../x": 400} {
			code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": id, "endpoint": ag.URL})
			if code != want || (want == 400 && errCode(body) != "invalid_agent_id") {
				t.Errorf("register %q: %d %v, want %d", id, code, body, want)
			}
			if want == 201 {
				s.call("DELETE", "/v1/agents/"+id, adminKey, nil)
			}
		}
		// An agent that already has such an id (registered before they were
		// refused) can still be registered again: its key rotated, its
		// config-file entry applied at start.
		st, err := apserver.OpenStore(ctxTimeout(t, 30*time.Second), dsn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AgentUpsert(ctxTimeout(t, 10*time.Second), &store.AgentUpsertParams{AgentID: "old__id", Name: "old", Endpoint: ag.URL, KeyHash: "x", At: 1}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "old__id", "endpoint": ag.URL, "rotate_key": true}); code != http.StatusOK {
			t.Errorf("re-register an existing old__id: %d %v", code, body)
		}
		s.call("DELETE", "/v1/agents/old__id", adminKey, nil)
		// Seed 001's header for the admin key is accepted too.
		req, _ := http.NewRequest("GET", s.URL+"/v1/agents", nil)
		req.Header.Set("x-admin-key", adminKey)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("list agents with x-admin-key: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}

		// Endpoints refused (the server allows 127.0.0.1/32 only).
		for endpoint, want := range map[string]string{
			"http://169.254.169.254/":          "endpoint_not_allowed",
			"http://169.254.169.254/latest/":   "endpoint_not_allowed",
			"http://10.1.2.3:8000":             "endpoint_not_allowed",
			"http://192.168.0.10":              "endpoint_not_allowed",
			"http://[::1]:9000":                "endpoint_not_allowed",
			"http://[fd00:ec2::254]/":          "endpoint_not_allowed",
			"file:///etc/passwd":               "invalid_endpoint",
			"gopher://127.0.0.1:70/":           "invalid_endpoint",
			"http://user:pw@127.0.0.1:1/":      "invalid_endpoint",
			"not a url":                        "invalid_endpoint",
			"":                                 "invalid_endpoint",
			"http://no-such-host.invalid:9000": "invalid_endpoint",
		} {
			code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "evil", "endpoint": endpoint})
			if code != http.StatusBadRequest || errCode(body) != want {
				t.Errorf("endpoint %q: %d %v, want 400 %s", endpoint, code, body, want)
			}
		}
		for _, bad := range []any{`{"agent_id":`, `[]`, map[string]any{"agent_id": "bad id!", "endpoint": ag.URL}, map[string]any{"agent_id": "x", "endpoint": ag.URL, "capabilities": "chat"}} {
			code, body := s.call("POST", "/v1/agents/register", adminKey, bad)
			if code != http.StatusBadRequest {
				t.Errorf("bad body %v: %d %v", bad, code, body)
			}
		}
		if code, body := s.call("GET", "/v1/agents", adminKey, nil); code != 200 || len(body["agents"].([]any)) != 0 {
			t.Fatalf("refused registrations stored something: %v", body)
		}

		// Register, re-register, rotate.
		code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "a1", "name": "A", "endpoint": ag.URL + "/", "capabilities": []string{"chat"}})
		key1, _ := body["agent_api_key"].(string)
		if code != http.StatusCreated || key1 == "" || body["ok"] != true {
			t.Fatalf("register: %d %v", code, body)
		}
		code, body = s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "a1", "name": "A2", "endpoint": ag.URL})
		if code != 200 || body["agent_api_key"] != nil {
			t.Fatalf("re-register must not reveal a key: %d %v", code, body)
		}
		if code, _ := s.call("POST", "/v1/agents/a1:heartbeat", key1, nil); code != 200 {
			t.Fatalf("heartbeat with key1: %d", code)
		}
		code, body = s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "a1", "endpoint": ag.URL, "rotate_key": true})
		key2, _ := body["agent_api_key"].(string)
		if code != 200 || key2 == "" || key2 == key1 {
			t.Fatalf("rotate: %d %v", code, body)
		}
		if code, _ := s.call("POST", "/v1/agents/a1:heartbeat", key1, nil); code != http.StatusUnauthorized {
			t.Fatalf("old key after rotation: %d", code)
		}
		code, body = s.call("GET", "/v1/agents/a1", key2, nil)
		// Registration is declarative: the last one (no name) replaced the name.
		if code != 200 || body["name"] != "a1" || body["status"] != "healthy" || body["key_hash"] != nil {
			t.Fatalf("get agent: %d %v", code, body)
		}
		otherKey := s.register("a2", ag.URL)
		if code, _ := s.call("POST", "/v1/agents/a1:heartbeat", otherKey, nil); code != http.StatusForbidden {
			t.Fatalf("heartbeat for another agent: %d", code)
		}
		if code, _ := s.call("POST", "/v1/agents/a1:explode", key2, nil); code != http.StatusNotFound {
			t.Fatalf("unknown verb: %d", code)
		}
		if code, _ := s.call("DELETE", "/v1/agents/a2", otherKey, nil); code != http.StatusForbidden {
			t.Fatalf("agent deleting: %d", code)
		}
		if code, _ := s.call("DELETE", "/v1/agents/a2", adminKey, nil); code != 200 {
			t.Fatalf("delete: %d", code)
		}
		if code, _ := s.call("GET", "/v1/agents/a2", adminKey, nil); code != http.StatusNotFound {
			t.Fatalf("deleted agent: %d", code)
		}
		if code, _ := s.call("POST", "/v1/agents/a2:heartbeat", otherKey, nil); code != http.StatusUnauthorized {
			t.Fatalf("deleted agent's key: %d", code)
		}
	})
}

func TestHostnamesResolvingToPrivateAddressesAreRefused(t *testing.T) {
	// No allowlist at all: only public addresses may be registered.
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--endpoint-allowlist", "")
	ag := newScriptedAgent(t, modeStream, 1)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ag.URL, "http://"))
	for _, host := range []string{"localhost", "vm", "127.0.0.1"} {
		code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "x", "endpoint": "http://" + host + ":" + port})
		if code != http.StatusBadRequest || errCode(body) != "endpoint_not_allowed" {
			t.Errorf("%s: %d %v", host, code, body)
		}
	}
}

func TestAgentKeysReachOnlyTheirOwnRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStream, 2)
		keyA := s.register("a", ag.URL)
		keyB := s.register("b", ag.URL)
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "a", "message": map[string]any{"role": "user", "content": "hi"}})
		msgs := c.untilEnd()
		sid, runID := msgs[0]["session_id"].(string), msgs[0]["run_id"].(string)
		path := "/v1/sessions/" + sid + "/messages"

		if code, body := s.call("GET", path, keyA, nil, "x-run-id", runID); code != 200 || len(body["messages"].([]any)) != 2 {
			t.Fatalf("agent a reads its run's transcript: %d %v", code, body)
		}
		if code, body := s.call("GET", path, keyA, nil); code != http.StatusBadRequest || errCode(body) != "missing_run_id" {
			t.Fatalf("without x-run-id: %d %v", code, body)
		}
		if code, _ := s.call("GET", path, keyB, nil, "x-run-id", runID); code != http.StatusForbidden {
			t.Fatalf("agent b with a's run: %d", code)
		}
		if code, _ := s.call("GET", "/v1/runs/"+runID, keyB, nil); code != http.StatusNotFound {
			t.Fatalf("agent b reads a's run: %d", code)
		}
		// Every route refuses an agent whose x-run-id is another agent's
		// run, or no run at all; its own run passes.
		for _, rt := range []struct{ method, path string }{
			{"GET", "/v1/context/notes"},
			{"PUT", "/v1/context/notes"},
			{"POST", "/v1/agents/b:heartbeat"},
			{"GET", "/v1/agents"},
			{"GET", "/v1/tools"},
			{"GET", "/v1/tool_calls/tc_none"},
			{"GET", "/v1/runs/" + runID},
		} {
			var body any
			if rt.method == "PUT" {
				body = map[string]any{"data": "x"}
			}
			for _, foreign := range []string{runID, "run_none"} {
				if code, resp := s.call(rt.method, rt.path, keyB, body, "x-run-id", foreign); code != http.StatusForbidden || errCode(resp) != "forbidden" {
					t.Errorf("%s %s by b with x-run-id %s: %d %v", rt.method, rt.path, foreign, code, resp)
				}
			}
		}
		if code, resp := s.call("PUT", "/v1/context/notes", keyA, map[string]any{"data": "x"}, "x-run-id", runID); code >= 300 {
			t.Fatalf("a writes its context with its run: %d %v", code, resp)
		}
		if code, resp := s.call("POST", "/v1/agents/a:heartbeat", keyA, nil, "x-run-id", runID); code != 200 {
			t.Fatalf("a's heartbeat with its run: %d %v", code, resp)
		}
		if code, body := s.call("GET", "/v1/runs/"+runID, keyA, nil); code != 200 || body["status"] != "DONE" {
			t.Fatalf("agent a reads its run: %d %v", code, body)
		}
		if code, _ := s.call("GET", "/v1/runs/"+runID+"/events", keyA, nil); code != http.StatusForbidden {
			t.Fatalf("replay is for operators: %d", code)
		}
		// Append through the API (an agent may add to its session's transcript).
		if code, body := s.call("POST", path, keyA, map[string]any{"role": "assistant", "content": "note"}, "x-run-id", runID); code != http.StatusCreated || body["run_id"] != runID {
			t.Fatalf("append: %d %v", code, body)
		}
		for _, bad := range []any{map[string]any{"role": "wizard", "content": "x"}, map[string]any{"role": "user"}, "nope"} {
			if code, _ := s.call("POST", path, keyA, bad, "x-run-id", runID); code != http.StatusBadRequest {
				t.Fatalf("bad append %v: %d", bad, code)
			}
		}
		// Paging with limit/before.
		_, page := s.call("GET", path+"?limit=2", adminKey, nil)
		list := page["messages"].([]any)
		if len(list) != 2 || page["next_before"] == "" || list[1].(map[string]any)["content"] != "note" {
			t.Fatalf("page 1: %v", page)
		}
		_, page2 := s.call("GET", path+"?limit=2&before="+page["next_before"].(string), adminKey, nil)
		if l := page2["messages"].([]any); len(l) != 1 || l[0].(map[string]any)["role"] != "user" {
			t.Fatalf("page 2: %v", page2)
		}
		if code, _ := s.call("GET", path+"?limit=0", adminKey, nil); code != http.StatusBadRequest {
			t.Fatalf("limit=0: %d", code)
		}
		// Replay paging.
		_, ev := s.call("GET", "/v1/sessions/"+sid+"/events?after_seq=2&limit=2", adminKey, nil)
		evs := ev["events"].([]any)
		if len(evs) != 2 || seqOf(evs[0].(map[string]any)) != 3 || ev["next_after_seq"].(float64) != 4 {
			t.Fatalf("events page: %v", ev)
		}
		if code, _ := s.call("GET", "/v1/sessions/"+sid+"/events?after_seq=x", adminKey, nil); code != http.StatusBadRequest {
			t.Fatalf("bad after_seq: %d", code)
		}
	})
}

func TestContextStoreVersions(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		ag := newScriptedAgent(t, modeStream, 1)
		keyA := s.register("a", ag.URL)
		keyB := s.register("b", ag.URL)
		code, body := s.call("PUT", "/v1/context/plan/step-1", keyA, map[string]any{"data": map[string]any{"todo": []int{1, 2}}, "if_version": 0})
		if code != 200 || body["version"].(float64) != 1 {
			t.Fatalf("put v1: %d %v", code, body)
		}
		code, body = s.call("PUT", "/v1/context/plan/step-1", keyA, map[string]any{"data": "x", "if_version": 0})
		if code != http.StatusConflict || errCode(body) != "version_conflict" || body["error"].(map[string]any)["version"].(float64) != 1 {
			t.Fatalf("stale put: %d %v", code, body)
		}
		if code, body = s.call("PUT", "/v1/context/plan/step-1", keyA, map[string]any{"data": []any{"v2"}}); code != 200 || body["version"].(float64) != 2 {
			t.Fatalf("put v2: %d %v", code, body)
		}
		if code, body = s.call("GET", "/v1/context/plan/step-1?version=1", keyA, nil); code != 200 || body["data"].(map[string]any)["todo"] == nil {
			t.Fatalf("get v1: %d %v", code, body)
		}
		if code, body = s.call("GET", "/v1/context/plan/step-1", keyA, nil); code != 200 || body["version"].(float64) != 2 {
			t.Fatalf("get latest: %d %v", code, body)
		}
		if code, _ := s.call("GET", "/v1/context/plan/step-1", keyB, nil); code != http.StatusNotFound {
			t.Fatalf("other agent sees the key: %d", code)
		}
		for _, bad := range []any{"{", map[string]any{"nodata": 1}} {
			if code, _ := s.call("PUT", "/v1/context/k", keyA, bad); code != http.StatusBadRequest {
				t.Fatalf("bad put %v: %d", bad, code)
			}
		}
		if code, _ := s.call("PUT", "/v1/context/k", "alice-key", map[string]any{"data": 1}); code != http.StatusForbidden {
			t.Fatalf("user key on the context store: %d", code)
		}
		big := `{"data":"` + strings.Repeat("x", 5<<20) + `"}`
		if code, body := s.call("PUT", "/v1/context/k", keyA, big); code != http.StatusRequestEntityTooLarge {
			t.Fatalf("oversized put: %d %v", code, body)
		}
	})
}

func TestHealthAndReadiness(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := s.call("GET", p, "", nil); code != 200 || body["ok"] != true {
			t.Fatalf("%s: %d %v", p, code, body)
		}
	}
}

func TestMetrics(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db")
	ok := newScriptedAgent(t, modeStream, 3)
	bad := newScriptedAgent(t, modeHTTP500, 0)
	s.register("ok", ok.URL)
	s.register("bad", bad.URL)
	c := dial(t, s, "alice", "alice-key")
	for _, a := range []string{"ok", "bad", "ok"} {
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": a, "message": map[string]any{"role": "user", "content": "x"}})
		c.untilEnd()
	}
	req, _ := http.NewRequest("GET", s.URL+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("metrics without key: %v %v", resp, err)
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`agentplane_runs_started_total{agent="ok"} 2`,
		`agentplane_runs_started_total{agent="bad"} 1`,
		`agentplane_runs_finished_total{agent="ok",cause="agent",code="",status="DONE"} 2`,
		`agentplane_runs_finished_total{agent="bad",cause="agent",code="agent_http_error",status="FAILED"} 1`,
		`agentplane_run_duration_seconds_count{agent="ok",status="DONE"} 2`,
		"agentplane_ws_connections 1",
		"agentplane_runs_active 0",
		"agentplane_events_appended_total",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}
