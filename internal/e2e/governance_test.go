package e2e

// End-to-end tests of governance (issue 14, DESIGN §15): the real binary on
// SQLite and PostgreSQL — the audit log, user keys managed over the API,
// agent key rotation with a grace period, rate limits, the per-user run
// cap, the global run queue, retention and redaction.

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apserver "github.com/agentplane/agentplane/internal/server"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// writeConfig writes a config file for a server and returns the env that
// names it.
func writeConfig(t *testing.T, yml string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agentplane.yaml")
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"AGENTPLANE_CONFIG=" + p}
}

// auditEntries lists the audit log (admin), newest first, following the
// cursor through pages of limit.
func auditEntries(t *testing.T, s *server, query string, limit int) []map[string]any {
	t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		q := fmt.Sprintf("/v1/audit?limit=%d%s", limit, query)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		code, body := s.call("GET", q, adminKey, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", q, code, body)
		}
		for _, e := range body["entries"].([]any) {
			out = append(out, e.(map[string]any))
		}
		next, _ := body["next_cursor"].(string)
		if next == "" {
			return out
		}
		cursor = next
	}
}

// replyTo reads until the reply (no seq) to requestID, skipping the events
// of sessions the connection follows.
func (c *client) replyTo(requestID string) map[string]any {
	c.t.Helper()
	for {
		if m := c.next(); m["seq"] == nil && m["request_id"] == requestID {
			return m
		}
	}
}

// waitWithin polls cond until it holds or the deadline passes.
func waitWithin(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Every admin action leaves exactly one audit row naming who did it —
// approvals decided over HTTP and over WebSocket included — and an action
// that was refused leaves none. User keys created over the API work at
// once (WebSocket hello and HTTP) and stop when deleted; a rotated agent
// key keeps working for the configured grace period, then stops.
func TestAdminActionsAreAuditedAndKeysManagedOverTheAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServerEnv(t, dsn, writeConfig(t, "limits: {agent_key_grace_seconds: 2}\n"))
		te := newToolEndpoint(t)
		ga := startGoToolAgent(t, s, "gov") // agent.register
		if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "gov", "name": "Gov", "endpoint": ga.srv.URL}); code != http.StatusOK {
			t.Fatalf("re-register: %d %v", code, body) // agent.update
		}
		putTool(t, s, "pay", transferTool(te.URL, "return_to_agent", alwaysApproval)) // tool.put
		if code, _ := s.call("PUT", "/v1/tools/bad", adminKey, map[string]any{"kind": "nope"}); code != http.StatusBadRequest {
			t.Fatalf("a bad tool was accepted: %d", code) // refused: no row
		}

		// A user that exists only through the API.
		code, created := s.call("POST", "/v1/users/carol/keys", adminKey, nil) // user_key.create
		if code != http.StatusCreated || !strings.HasPrefix(sv(created, "key"), "usr_") || sv(created, "key_id") == "" || sv(created, "user_id") != "carol" {
			t.Fatalf("create key: %d %v", code, created)
		}
		carolKey := sv(created, "key")
		code, listed := s.call("GET", "/v1/users/carol/keys", adminKey, nil)
		if code != http.StatusOK || len(listed["keys"].([]any)) != 1 || strings.Contains(fmt.Sprint(listed), carolKey) {
			t.Fatalf("list keys: %d %v", code, listed)
		}
		if code, _ := s.call("GET", "/v1/agents", carolKey, nil); code != http.StatusOK {
			t.Fatalf("carol's key over HTTP: %d", code)
		}
		if code, _ := s.call("POST", "/v1/users/carol/keys", carolKey, nil); code != http.StatusForbidden {
			t.Fatalf("a user key managed keys: %d", code)
		}
		c := dial(t, s, "carol", carolKey)

		// Two approvals: one decided by carol over WebSocket, one by the admin over HTTP.
		decide := func(overWS bool) {
			c.invokeSpec("gov", "", map[string]any{"tool": "pay", "args": map[string]any{"amount": 5, "to": "bob"}})
			msgs := c.readUntilAll("approval", isType("approval_required"))
			ap := find(t, msgs, "approval_required", isType("approval_required"))
			if overWS {
				c.send(map[string]any{"type": "approval_decision", "request_id": "d", "run_id": sv(ap, "run_id"), "approval_id": sv(ap, "approval_id"), "decision": "approve"})
			} else if code, body := s.call("POST", "/v1/approvals/"+sv(ap, "approval_id")+":decide", adminKey, map[string]any{"decision": "reject", "reason": "no"}); code != http.StatusOK {
				t.Fatalf("decide: %d %v", code, body)
			}
			if end := c.untilEnd(); end[len(end)-1]["type"] != "done" {
				t.Fatalf("run ended %v", end[len(end)-1])
			}
		}
		decide(true)  // approval.decide by user:carol
		decide(false) // approval.decide by admin

		// An operator's cancels are audited; a user's own is not (the
		// event log has it).
		c.invokeSpec("gov", "", map[string]any{"hold": true})
		if code, body := s.call("POST", "/v1/runs/"+ga.held(t)+":cancel", adminKey, map[string]any{"reason": "ops"}); code != http.StatusOK { // run.cancel
			t.Fatalf("admin cancel: %d %v", code, body)
		}
		c.untilEnd()
		c.invokeSpec("gov", "", map[string]any{"hold": true})
		if code, body := s.call("POST", "/v1/runs/"+ga.held(t)+":cancel", carolKey, nil); code != http.StatusOK { // no row
			t.Fatalf("user cancel: %d %v", code, body)
		}
		c.untilEnd()
		c.invokeSpec("gov", "", map[string]any{"tool": "pay", "args": map[string]any{"amount": 5, "to": "bob"}})
		pending := find(t, c.readUntilAll("approval", isType("approval_required")), "approval_required", isType("approval_required"))
		if code, body := s.call("POST", "/v1/tool_calls/"+sv(pending, "tool_call_id")+":cancel", adminKey, nil); code != http.StatusOK { // tool_call.cancel
			t.Fatalf("admin cancels a tool call: %d %v", code, body)
		}
		c.untilEnd()

		if code, _ := s.call("DELETE", "/v1/tools/pay", adminKey, nil); code != http.StatusOK { // tool.delete
			t.Fatalf("delete tool: %d", code)
		}
		if code, _ := s.call("DELETE", "/v1/tools/pay", adminKey, nil); code != http.StatusNotFound {
			t.Fatalf("delete tool twice: %d", code) // refused: no row
		}

		// Rotation: the old key keeps working for the grace period (2 s), then stops.
		oldKey := ga.key
		code, rot := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "gov", "endpoint": ga.srv.URL, "rotate_key": true}) // agent.rotate_key
		newKey := sv(rot, "agent_api_key")
		if code != http.StatusOK || newKey == "" || newKey == oldKey {
			t.Fatalf("rotate: %d %v", code, rot)
		}
		rotatedAt := time.Now()
		for _, k := range []string{oldKey, newKey} {
			if code, _ := s.call("GET", "/v1/agents/gov", k, nil); code != http.StatusOK {
				t.Fatalf("key right after rotation: %d", code)
			}
		}
		waitWithin(t, "the old agent key expires", 10*time.Second, func() bool {
			code, _ := s.call("GET", "/v1/agents/gov", oldKey, nil)
			return code == http.StatusUnauthorized
		})
		if since := time.Since(rotatedAt); since < 1500*time.Millisecond {
			t.Fatalf("the old key stopped after %s, before its 2 s grace", since)
		}
		if code, _ := s.call("GET", "/v1/agents/gov", newKey, nil); code != http.StatusOK {
			t.Fatalf("new key: %d", code)
		}

		keyID := sv(created, "key_id")
		if code, _ := s.call("DELETE", "/v1/users/carol/keys/"+keyID, adminKey, nil); code != http.StatusOK { // user_key.delete
			t.Fatalf("delete key: %d", code)
		}
		if code, _ := s.call("GET", "/v1/agents", carolKey, nil); code != http.StatusUnauthorized {
			t.Fatalf("deleted key over HTTP: %d", code)
		}
		c2 := dialRaw(t, s)
		c2.send(map[string]any{"type": "hello", "user_id": "carol", "api_key": carolKey})
		if m := c2.next(); m["type"] != "error" || m["code"] != "unauthorized" {
			t.Fatalf("deleted key hello: %v", m)
		}
		if code, _ := s.call("DELETE", "/v1/agents/gov", adminKey, nil); code != http.StatusOK { // agent.delete
			t.Fatalf("delete agent: %d", code)
		}
		mcpSrv := newGoMCPServer(t)
		putMCPServer(t, s, "calc", map[string]any{"transport": "streamable_http", "url": mcpSrv.URL, "headers": map[string]any{"Authorization": "Bearer mcp-secret-token"}}) // mcp_server.put
		if code, _ := s.call("DELETE", "/v1/mcp_servers/calc", adminKey, nil); code != http.StatusOK {                                                                       // mcp_server.delete
			t.Fatalf("delete MCP server: %d", code)
		}

		got := auditEntries(t, s, "", 3)
		var seq []string
		for i := len(got) - 1; i >= 0; i-- {
			seq = append(seq, sv(got[i], "actor")+" "+sv(got[i], "action")+" "+sv(got[i], "target"))
		}
		want := []string{
			"admin agent.register gov", "admin agent.update gov", "admin tool.put pay", "admin user_key.create carol",
			"user:carol approval.decide", "admin approval.decide", "admin run.cancel run_", "admin tool_call.cancel tc_", "admin tool.delete pay", "admin agent.rotate_key gov",
			"admin user_key.delete carol", "admin agent.delete gov", "admin mcp_server.put calc", "admin mcp_server.delete calc",
		}
		if len(seq) != len(want) {
			t.Fatalf("audit log:\n%s\nwant:\n%s", strings.Join(seq, "\n"), strings.Join(want, "\n"))
		}
		for i := range want {
			if !strings.HasPrefix(seq[i], want[i]) {
				t.Fatalf("audit row %d = %q, want %q…\nall:\n%s", i, seq[i], want[i], strings.Join(seq, "\n"))
			}
		}
		if d := obj(got[len(got)-5], "detail"); d["decision"] != "approved" || d["tool_name"] != "pay" {
			t.Fatalf("WebSocket decision detail: %v", d)
		}
		if d := obj(got[len(got)-7], "detail"); d["reason"] != "ops" || d["agent_id"] != "gov" || sv(d, "session_id") == "" {
			t.Fatalf("run.cancel detail: %v", d)
		}
		for _, e := range got {
			if strings.Contains(fmt.Sprint(e), carolKey) || strings.Contains(fmt.Sprint(e), newKey) || strings.Contains(fmt.Sprint(e), "mcp-secret-token") {
				t.Fatalf("a key reached the audit log: %v", e)
			}
		}
		if n := len(auditEntries(t, s, "&actor=user:carol", 10)); n != 1 {
			t.Fatalf("actor filter: %d rows", n)
		}
		if n := len(auditEntries(t, s, "&action=tool.put&since=1", 10)); n != 1 {
			t.Fatalf("action filter: %d rows", n)
		}
		if code, body := s.call("GET", "/v1/audit?cursor=zzz", adminKey, nil); code != http.StatusBadRequest || sv(obj(body, "error"), "code") != "invalid_cursor" {
			t.Fatalf("bad cursor: %d %v", code, body)
		}
		if code, _ := s.call("GET", "/v1/audit", "alice-key", nil); code != http.StatusForbidden {
			t.Fatalf("a user read the audit log: %d", code)
		}
	})
}

// On PostgreSQL a user key created through one replica works on another at
// once, and a key deleted through one stops working on the other within the
// key cache's TTL (5 s).
func TestUserKeysAcrossReplicas(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "keys-a")
	b := startServer(t, dsn, "--instance-id", "keys-b")
	code, created := a.call("POST", "/v1/users/dave/keys", adminKey, nil)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	key := sv(created, "key")
	dial(t, b, "dave", key)
	if code, _ := b.call("GET", "/v1/agents", key, nil); code != http.StatusOK {
		t.Fatalf("on the other replica: %d", code)
	}
	if code, _ := a.call("DELETE", "/v1/users/dave/keys/"+sv(created, "key_id"), adminKey, nil); code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	deleted := time.Now()
	waitWithin(t, "the deleted key stops working on the other replica", 10*time.Second, func() bool {
		code, _ := b.call("GET", "/v1/agents", key, nil)
		return code == http.StatusUnauthorized
	})
	if d := time.Since(deleted); d > 6*time.Second {
		t.Fatalf("the deleted key kept working for %s", d)
	}
}

// Rate limits per user key and per agent key: over HTTP a request past the
// bucket gets 429 rate_limited with Retry-After (the LLM proxy too); over
// WebSocket a command past it gets error rate_limited with retry_after and
// the connection stays open; both recover once the bucket refills. The
// admin key is not limited.
func TestRateLimitsAnswerRetryAfterAndRecover(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServerEnv(t, dsn, writeConfig(t, `
limits:
  user_requests_per_second: 1
  user_burst: 2
  agent_requests_per_second: 1
  agent_burst: 2
`))
		agentKey := s.register("rl", "http://127.0.0.1:1")
		for i := range 5 {
			if code, _ := s.call("GET", "/v1/agents", adminKey, nil); code != http.StatusOK {
				t.Fatalf("admin request %d: %d", i, code)
			}
		}
		limited := func(key, method, path string, body []byte) {
			t.Helper()
			var code int
			var hdr http.Header
			var raw []byte
			for i := 0; i < 4; i++ {
				if code, hdr, raw = rawCall(t, s, method, path, key, body); code == http.StatusTooManyRequests {
					break
				}
			}
			if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || !strings.Contains(string(raw), `"code":"rate_limited"`) {
				t.Fatalf("%s %s past the burst: %d Retry-After %q %s", method, path, code, hdr.Get("Retry-After"), raw)
			}
			waitWithin(t, "the bucket refills", 5*time.Second, func() bool {
				code, _, _ := rawCall(t, s, method, path, key, body)
				return code != http.StatusTooManyRequests
			})
		}
		limited("alice-key", "GET", "/v1/agents", nil)
		limited(agentKey, "GET", "/v1/agents/rl", nil)
		limited(agentKey, "POST", "/v1/chat/completions", []byte(`{"model":"m","messages":[]}`))

		c := dial(t, s, "alice", "alice-key")
		var refused map[string]any
		for i := 0; i < 4 && refused == nil; i++ {
			c.send(map[string]any{"type": "subscribe", "request_id": fmt.Sprint("s", i), "session_id": "nope", "after_seq": 0})
			if m := c.nextReply(); m["code"] == "rate_limited" {
				refused = m
			} else if m["code"] != "session_not_found" {
				t.Fatalf("subscribe answered %v", m)
			}
		}
		if refused == nil || num(refused, "retry_after") != 1 || sv(refused, "request_id") == "" {
			t.Fatalf("no rate_limited reply with retry_after: %v", refused)
		}
		waitWithin(t, "the connection's commands are admitted again", 5*time.Second, func() bool {
			c.send(map[string]any{"type": "subscribe", "request_id": "again", "session_id": "nope", "after_seq": 0})
			return c.nextReply()["code"] == "session_not_found"
		})
	})
}

// On PostgreSQL the limits hold across replicas: a user's burst is shared
// by the processes (requests through either count against one bucket), and
// AGENTPLANE_MAX_WS_PER_USER counts the user's connections on every
// replica; a closed connection frees its place for the other replica.
func TestLimitsHoldAcrossReplicas(t *testing.T) {
	dsn := testdbDSN(t, "postgres")
	cfg := writeConfig(t, "limits: {user_requests_per_second: 0.2, user_burst: 4}\n")
	env := append(cfg, "AGENTPLANE_MAX_WS_PER_USER=2")
	a := startServerEnv(t, dsn, env, "--instance-id", "rl-a")
	b := startServerEnv(t, dsn, env, "--instance-id", "rl-b")
	ok := 0
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		if code, _ := s.call("GET", "/v1/agents", "alice-key", nil); code == http.StatusOK {
			ok++
		}
	}
	if ok > 4 || ok < 3 {
		t.Fatalf("%d requests admitted across two replicas with a shared burst of 4", ok)
	}

	c1 := dial(t, a, "bob", "bob-key")
	dial(t, b, "bob", "bob-key")
	c3 := dialRaw(t, a)
	c3.send(map[string]any{"type": "hello", "user_id": "bob", "api_key": "bob-key"})
	if m := c3.next(); m["type"] != "error" || m["code"] != "too_many_connections" {
		t.Fatalf("third connection across replicas: %v", m)
	}
	c1.conn.Close()
	waitWithin(t, "the closed connection's place is free on the other replica", 10*time.Second, func() bool {
		c := dialRaw(t, b)
		c.send(map[string]any{"type": "hello", "user_id": "bob", "api_key": "bob-key"})
		return c.next()["type"] == "ready"
	})
}

// tableCounts counts a session's rows per table, through the database.
func tableCounts(t *testing.T, st store.Store, sessionID string) string {
	t.Helper()
	out := ""
	for _, table := range []string{"sessions", "runs", "events", "messages", "tool_calls", "approvals"} {
		out += fmt.Sprintf("%s=%d ", table, testdb.Count(t, st, `SELECT COUNT(*) FROM `+table+` WHERE session_id = '`+sessionID+`'`))
	}
	return out
}

// ageSessions moves sessions' timestamps two days back, as if they had
// been idle that long.
func ageSessions(t *testing.T, st store.Store, ids ...string) {
	t.Helper()
	in := "'" + strings.Join(ids, "','") + "'"
	const twoDays = 2 * 24 * 3600 * 1000
	for _, q := range []string{
		fmt.Sprintf(`UPDATE sessions SET created_at = created_at - %d WHERE session_id IN (%s)`, twoDays, in),
		fmt.Sprintf(`UPDATE runs SET started_at = started_at - %d, ended_at = ended_at - %d WHERE session_id IN (%s)`, twoDays, twoDays, in),
		fmt.Sprintf(`UPDATE events SET ts = ts - %d WHERE session_id IN (%s)`, twoDays, in),
	} {
		if err := testdb.Exec(t, st, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// DELETE /v1/sessions/{id} removes a session now (409 while a run of it is
// active, unless force=true, which cancels it first), and the retention
// sweeper deletes sessions idle past retention.days — every row of them —
// while a session with an active run, however old, keeps every row. Each
// deletion is one audit row.
func TestSessionDeletionAndRetention(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServerEnv(t, dsn, writeConfig(t, "retention: {days: 1, sweep_interval: 1s}\n"))
		ga := startGoToolAgent(t, s, "ret")
		c := dial(t, s, "alice", "alice-key")
		finished := func() string {
			t.Helper()
			started := c.invokeSpec("ret", "", map[string]any{})
			if end := c.untilEnd(); end[len(end)-1]["type"] != "done" {
				t.Fatalf("run ended %v", end[len(end)-1])
			}
			return sv(started, "session_id")
		}
		held := func() (sessionID, runID string) {
			t.Helper()
			started := c.invokeSpec("ret", "", map[string]any{"hold": true})
			ga.held(t)
			return sv(started, "session_id"), sv(started, "run_id")
		}
		oldA, oldB, deleted := finished(), finished(), finished()
		busy, busyRun := held()

		code, body := s.call("DELETE", "/v1/sessions/"+deleted, adminKey, nil)
		if code != http.StatusOK || num(obj(body, "deleted"), "runs") != 1 || num(obj(body, "deleted"), "events") < 3 {
			t.Fatalf("delete: %d %v", code, body)
		}
		// Every table is named, the ones with nothing deleted too.
		for _, k := range []string{"events", "messages", "runs", "tool_calls", "approvals"} {
			if _, ok := obj(body, "deleted")[k]; !ok {
				t.Fatalf("delete: deleted has no %s: %v", k, body)
			}
		}
		if code, _ := s.call("GET", "/v1/sessions/"+deleted+"/events", adminKey, nil); code != http.StatusNotFound {
			t.Fatalf("a deleted session's events: %d", code)
		}
		if code, body := s.call("DELETE", "/v1/sessions/"+busy, adminKey, nil); code != http.StatusConflict || sv(obj(body, "error"), "code") != "session_busy" {
			t.Fatalf("delete a busy session: %d %v", code, body)
		}
		if code, _ := s.call("DELETE", "/v1/sessions/nope", adminKey, nil); code != http.StatusNotFound {
			t.Fatalf("delete no session: %d", code)
		}
		if code, _ := s.call("DELETE", "/v1/sessions/"+oldA, "alice-key", nil); code != http.StatusForbidden {
			t.Fatalf("a user deleted a session: %d", code)
		}
		// The id stays deleted: a client still following it must not be
		// handed a new conversation under it.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "again", "session_id": deleted, "agent_id": "ret", "message": map[string]any{"role": "user", "content": "{}"}})
		if m := c.replyTo("again"); m["type"] != "error" || m["code"] != "session_not_found" {
			t.Fatalf("invoke in a deleted session's id: %v", m)
		}

		forced, _ := held()
		if code, body := s.call("DELETE", "/v1/sessions/"+forced+"?force=maybe", adminKey, nil); code != http.StatusBadRequest || sv(obj(body, "error"), "code") != "invalid_param" {
			t.Fatalf("force=maybe: %d %v", code, body)
		}
		code, body = s.call("DELETE", "/v1/sessions/"+forced+"?force=1", adminKey, nil)
		if code != http.StatusOK || len(body["cancelled_runs"].([]any)) != 1 {
			t.Fatalf("forced delete: %d %v", code, body)
		}

		st, err := apserver.OpenStore(ctxTimeout(t, 30*time.Second), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		busyBefore := tableCounts(t, st, busy)
		ageSessions(t, st, oldA, oldB, busy)
		waitWithin(t, "the sweeper deletes the idle sessions", 20*time.Second, func() bool {
			return tableCounts(t, st, oldA) == "sessions=0 runs=0 events=0 messages=0 tool_calls=0 approvals=0 " &&
				tableCounts(t, st, oldB) == "sessions=0 runs=0 events=0 messages=0 tool_calls=0 approvals=0 "
		})
		if got := tableCounts(t, st, busy); got != busyBefore {
			t.Fatalf("the session with an active run went from %s to %s", busyBefore, got)
		}
		if runStatus(t, s, busyRun) != "RUNNING" {
			t.Fatalf("the active run is %s", runStatus(t, s, busyRun))
		}
		ga.releaseAll()
		waitRunEnded(t, s, busyRun)

		purged := auditEntries(t, s, "&action=session.purge", 100)
		if len(purged) != 2 || sv(purged[0], "actor") != "retention" {
			t.Fatalf("retention audit rows: %v", purged)
		}
		dels := auditEntries(t, s, "&action=session.delete", 100)
		if len(dels) != 2 || sv(dels[0], "target") != forced || obj(dels[0], "detail")["force"] != true || sv(dels[1], "target") != deleted {
			t.Fatalf("delete audit rows: %v", dels)
		}
	})
}
