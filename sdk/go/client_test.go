package agentplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

func boundClient(fp *fakePlatform) *agentplane.Client {
	return &agentplane.Client{BaseURL: fp.URL, APIKey: "ak_1", AgentID: "echo", RunID: "run_1", SessionID: "ses_1"}
}

func assertAttributed(t *testing.T, rec recorded) {
	t.Helper()
	if rec.Header.Get("Authorization") != "Bearer ak_1" || rec.Header.Get("x-run-id") != "run_1" || rec.Header.Get("x-session-id") != "ses_1" {
		t.Errorf("%s %s: headers = %v", rec.Method, rec.Path, rec.Header)
	}
}

func TestClientHeartbeat(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"POST /v1/agents/echo:heartbeat":  okJSON(map[string]any{"ok": true}),
		"POST /v1/agents/other:heartbeat": okJSON(map[string]any{"ok": true}),
	})
	c := boundClient(fp)
	if err := c.Heartbeat(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	assertAttributed(t, fp.last(t))
	if err := c.Heartbeat(context.Background(), "other"); err != nil {
		t.Fatal(err)
	}
	c.AgentID = ""
	if err := c.Heartbeat(context.Background(), ""); err == nil {
		t.Fatal("Heartbeat without an agent id returned nil")
	}
}

func TestClientMessagesAndAppend(t *testing.T) {
	page := map[string]any{
		"messages":    []any{map[string]any{"message_id": "m2", "session_id": "ses 1", "run_id": "", "role": "user", "content": "hi", "created_at": 5}},
		"next_before": "m2",
	}
	// The session id holds a space and a slash: it must travel escaped.
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"GET /v1/sessions/ses%201%2Fx/messages": okJSON(page),
		"POST /v1/sessions/ses_1/messages": func(r recorded) reply {
			return reply{200, map[string]any{"message_id": "m3", "session_id": "ses_1", "run_id": "run_1", "role": r.Body["role"], "content": r.Body["content"], "created_at": 6}}
		},
	})
	c := boundClient(fp)
	ctx := context.Background()

	got, err := c.Messages(ctx, "ses 1/x", 10, "m9")
	if err != nil {
		t.Fatal(err)
	}
	want := &agentplane.MessagePage{Messages: []agentplane.StoredMessage{{MessageID: "m2", SessionID: "ses 1", Role: "user", Content: "hi", CreatedAt: 5}}, NextBefore: "m2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Messages = %+v, want %+v", got, want)
	}
	rec := fp.last(t)
	if !reflect.DeepEqual(rec.Query, map[string][]string{"limit": {"10"}, "before": {"m9"}}) {
		t.Errorf("query = %v", rec.Query)
	}
	assertAttributed(t, rec)

	if _, err := c.Messages(ctx, "ses 1/x", 0, ""); err != nil {
		t.Fatal(err)
	}
	if q := fp.last(t).Query; len(q) != 0 {
		t.Errorf("query = %v, want none when limit and before are unset", q)
	}

	m, err := c.AppendMessage(ctx, "", agentplane.Message{Role: "assistant", Content: "yo"})
	if err != nil {
		t.Fatal(err)
	}
	if m.MessageID != "m3" || m.Content != "yo" {
		t.Errorf("AppendMessage = %+v", m)
	}
	rec = fp.last(t)
	if !reflect.DeepEqual(rec.Body, map[string]any{"role": "assistant", "content": "yo"}) || rec.Header.Get("Content-Type") != "application/json" {
		t.Errorf("append request = %+v", rec)
	}
	assertAttributed(t, rec)

	if _, err := (&agentplane.Client{BaseURL: fp.URL}).Messages(ctx, "", 0, ""); err == nil {
		t.Error("Messages without a session id returned nil")
	}
}

// TestStoredMessageCarriesItsRun: transcript rows keep who wrote them —
// agent_id, and for a child run's rows parent_run_id; intention_id
// (DESIGN §11/§12, API.md "Sessions") — as the platform sends them.
func TestStoredMessageCarriesItsRun(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"GET /v1/sessions/ses_1/messages": okJSON(map[string]any{"messages": []any{
			map[string]any{"message_id": "m1", "session_id": "ses_1", "run_id": "run_1", "agent_id": "caller", "intention_id": "int_1", "role": "user", "content": "hi", "created_at": 5},
			map[string]any{"message_id": "m2", "session_id": "ses_1", "run_id": "run_2", "agent_id": "worker", "parent_run_id": "run_1", "intention_id": "int_2", "role": "assistant", "content": "yo", "created_at": 6},
		}, "next_before": ""}),
	})
	got, err := boundClient(fp).Transcript(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []agentplane.StoredMessage{
		{MessageID: "m1", SessionID: "ses_1", RunID: "run_1", AgentID: "caller", IntentionID: "int_1", Role: "user", Content: "hi", CreatedAt: 5},
		{MessageID: "m2", SessionID: "ses_1", RunID: "run_2", AgentID: "worker", ParentRunID: "run_1", IntentionID: "int_2", Role: "assistant", Content: "yo", CreatedAt: 6},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Transcript = %+v, want %+v", got, want)
	}
	// Encoded again (an agent passing rows on), a root row has no parent.
	out, _ := json.Marshal(got[0])
	if string(out) != `{"message_id":"m1","session_id":"ses_1","run_id":"run_1","agent_id":"caller","intention_id":"int_1","role":"user","content":"hi","created_at":5}` {
		t.Errorf("re-encoded = %s", out)
	}
}

func TestClientTranscriptPagesBackToTheStart(t *testing.T) {
	// Five messages m1..m5 served newest page first, two per page.
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"GET /v1/sessions/ses_1/messages": func(r recorded) reply {
			before := 6
			if b := r.Query["before"]; len(b) == 1 {
				fmt.Sscanf(b[0], "m%d", &before)
			}
			var msgs []any
			first := max(1, before-2)
			for i := first; i < before; i++ {
				msgs = append(msgs, map[string]any{"message_id": fmt.Sprintf("m%d", i)})
			}
			next := ""
			if first > 1 {
				next = fmt.Sprintf("m%d", first)
			}
			return reply{200, map[string]any{"messages": msgs, "next_before": next}}
		},
	})
	got, err := boundClient(fp).Transcript(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range got {
		ids = append(ids, m.MessageID)
	}
	if want := []string{"m1", "m2", "m3", "m4", "m5"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("Transcript ids = %v, want %v", ids, want)
	}
	if fp.count() != 3 {
		t.Errorf("%d requests, want 3 pages", fp.count())
	}
}

func TestClientContextPutAndGet(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"PUT /v1/context/notes%2Fuser%201": okJSON(map[string]any{"key": "notes/user 1", "version": 3, "created_at": 7}),
		"GET /v1/context/notes%2Fuser%201": okJSON(map[string]any{"key": "notes/user 1", "version": 2, "data": map[string]any{"a": []int{1}}, "created_at": 6}),
	})
	c := boundClient(fp)
	ctx := context.Background()

	put, err := c.ContextPut(ctx, "notes/user 1", map[string]any{"a": []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if put.Version != 3 || put.Key != "notes/user 1" {
		t.Errorf("ContextPut = %+v", put)
	}
	rec := fp.last(t)
	if !reflect.DeepEqual(rec.Body, map[string]any{"data": map[string]any{"a": []any{float64(1)}}}) {
		t.Errorf("put body = %v (no if_version expected)", rec.Body)
	}
	assertAttributed(t, rec)

	if _, err := c.ContextPutIfVersion(ctx, "notes/user 1", json.RawMessage(`"raw"`), 0); err != nil {
		t.Fatal(err)
	}
	if body := fp.last(t).Body; !reflect.DeepEqual(body, map[string]any{"data": "raw", "if_version": float64(0)}) {
		t.Errorf("put body = %v, want if_version 0 sent", body)
	}

	got, err := c.ContextGet(ctx, "notes/user 1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 2 || string(got.Data) != `{"a":[1]}` || got.CreatedAt != 6 {
		t.Errorf("ContextGet = %+v (data %s)", got, got.Data)
	}
	if q := fp.last(t).Query; !reflect.DeepEqual(q, map[string][]string{"version": {"2"}}) {
		t.Errorf("query = %v", q)
	}
	if _, err := c.ContextGet(ctx, "notes/user 1", 0); err != nil {
		t.Fatal(err)
	}
	if q := fp.last(t).Query; len(q) != 0 {
		t.Errorf("query = %v, want none for the latest version", q)
	}
}

func TestClientAPIErrors(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"PUT /v1/context/k": func(recorded) reply {
			return reply{http.StatusConflict, map[string]any{"error": map[string]any{"code": "version_conflict", "message": "latest is 4"}}}
		},
		"GET /v1/context/k": func(recorded) reply { return reply{http.StatusBadGateway, []byte("<html>bad gateway</html>")} },
	})
	c := boundClient(fp)
	ctx := context.Background()

	_, err := c.ContextPutIfVersion(ctx, "k", 1, 3)
	var apiErr *agentplane.APIError
	if !errors.As(err, &apiErr) || *apiErr != (agentplane.APIError{Status: 409, Code: "version_conflict", Message: "latest is 4"}) {
		t.Fatalf("err = %#v", err)
	}

	_, err = c.ContextGet(ctx, "k", 0)
	if !errors.As(err, &apiErr) || apiErr.Status != 502 || apiErr.Code != "http_502" || !strings.Contains(apiErr.Message, "bad gateway") {
		t.Fatalf("err = %#v", err)
	}

	_, err = c.Messages(ctx, "", 0, "") // no such route on the fake: the platform's 404 shape
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "not_found" {
		t.Fatalf("err = %#v", err)
	}
}

func TestClientTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	err = (&agentplane.Client{BaseURL: "http://" + addr, APIKey: "k"}).Heartbeat(context.Background(), "echo")
	var apiErr *agentplane.APIError
	if err == nil || errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want a transport error that is not an *APIError", err)
	}
	if err := (&agentplane.Client{}).Heartbeat(context.Background(), "echo"); err == nil || !strings.Contains(err.Error(), agentplane.EnvURL) {
		t.Fatalf("err = %v, want one naming %s", err, agentplane.EnvURL)
	}
}

func TestRegister(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{
		"POST /v1/agents/register": okJSON(map[string]any{"ok": true, "agent_id": "echo", "agent_api_key": "ak_new"}),
	})
	ctx := context.Background()
	got, err := agentplane.Register(ctx, fp.URL, "admin_1", agentplane.RegisterParams{AgentID: "echo", Name: "Echo", Endpoint: "http://127.0.0.1:9001"})
	if err != nil {
		t.Fatal(err)
	}
	if *got != (agentplane.RegisterResult{OK: true, AgentID: "echo", AgentAPIKey: "ak_new"}) {
		t.Errorf("Register = %+v", got)
	}
	rec := fp.last(t)
	if rec.Header.Get("Authorization") != "Bearer admin_1" || rec.Header.Get("x-run-id") != "" {
		t.Errorf("headers = %v", rec.Header)
	}
	want := map[string]any{"agent_id": "echo", "name": "Echo", "endpoint": "http://127.0.0.1:9001", "capabilities": []any{}}
	if !reflect.DeepEqual(rec.Body, want) {
		t.Errorf("body = %v, want %v", rec.Body, want)
	}

	_, err = agentplane.Register(ctx, fp.URL, "admin_1", agentplane.RegisterParams{
		AgentID: "echo", Name: "Echo", Endpoint: "http://127.0.0.1:9001",
		Capabilities: []string{"chat"}, LinkedAgents: []string{"helper"}, RotateKey: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{"agent_id": "echo", "name": "Echo", "endpoint": "http://127.0.0.1:9001", "capabilities": []any{"chat"}, "linked_agents": []any{"helper"}, "rotate_key": true}
	if body := fp.last(t).Body; !reflect.DeepEqual(body, want) {
		t.Errorf("body = %v, want %v", body, want)
	}
}

func TestClientOpenAIConfigAndEnv(t *testing.T) {
	t.Setenv(agentplane.EnvURL, "http://platform.example:8080/")
	t.Setenv(agentplane.EnvAgentKey, "ak_env")
	c := agentplane.NewClient("", "").WithRun("run_1", "ses_1")
	if c.OpenAIBaseURL() != "http://platform.example:8080/v1" || c.APIKey != "ak_env" {
		t.Errorf("client = %+v, base %q", c, c.OpenAIBaseURL())
	}
	if h := c.OpenAIHeaders(); !reflect.DeepEqual(h, map[string]string{"x-run-id": "run_1", "x-session-id": "ses_1"}) {
		t.Errorf("OpenAIHeaders = %v", h)
	}
	if h := agentplane.NewClient("http://x", "k").OpenAIHeaders(); len(h) != 0 {
		t.Errorf("unbound OpenAIHeaders = %v, want none", h)
	}
	// The /mcp server of the run: URL and the headers binding the session to it.
	want := agentplane.MCPConfig{URL: "http://platform.example:8080/mcp", Headers: map[string]string{"Authorization": "Bearer ak_env", "x-run-id": "run_1", "x-session-id": "ses_1"}}
	if got := c.MCPConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("MCPConfig = %+v, want %+v", got, want)
	}
	var none *agentplane.Client
	if got := none.MCPConfig(); got.URL != "" || got.Headers != nil {
		t.Errorf("nil client MCPConfig = %+v", got)
	}
}

func TestUnboundClientSendsNoAttribution(t *testing.T) {
	fp := newFakePlatform(t, map[string]func(recorded) reply{"POST /v1/agents/echo:heartbeat": okJSON(map[string]any{"ok": true})})
	if err := agentplane.NewClient(fp.URL, "ak_1").Heartbeat(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	if h := fp.last(t).Header; h.Get("x-run-id") != "" || h.Get("x-session-id") != "" || h.Get("Authorization") != "Bearer ak_1" {
		t.Errorf("headers = %v", h)
	}
}
