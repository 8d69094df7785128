package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// secretTool is a server tool that records the args it gets and answers
// without echoing them (a tool's own answer is not redacted).
type secretTool struct {
	*httptest.Server
	mu   sync.Mutex
	args []map[string]any
}

func newSecretTool(t *testing.T) *secretTool {
	t.Helper()
	st := &secretTool{}
	st.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Args map[string]any `json:"args"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		st.mu.Lock()
		st.args = append(st.args, body.Args)
		st.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"charged":true}`))
	}))
	t.Cleanup(st.Close)
	return st
}

func (st *secretTool) got() []map[string]any {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]map[string]any(nil), st.args...)
}

// cardTool is a server tool redacting card.number and cvv.
func cardTool(endpoint string, policy map[string]any) map[string]any {
	return map[string]any{"kind": "server", "endpoint": endpoint, "description": "Charges a card.",
		"parameters": map[string]any{"type": "object", "required": []any{"card", "amount"}, "properties": map[string]any{
			"amount": map[string]any{"type": "number"}, "cvv": map[string]any{"type": "string"},
			"card": map[string]any{"type": "object", "properties": map[string]any{"number": map[string]any{"type": "string"}}}}},
		"policy": policy, "redact": []any{"card.number", "cvv"}}
}

// startSecretAgent serves an agent (Go SDK) that calls each of tools with a
// card number and CVV only it knows — nothing the user typed — then says
// "ok". Its platform is s.
func startSecretAgent(t *testing.T, s *server, agentID, number, cvv string, tools ...string) {
	t.Helper()
	var h atomic.Pointer[agentplane.AgentHandler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := h.Load(); a != nil {
			a.ServeHTTP(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	key := s.register(agentID, srv.URL)
	h.Store(&agentplane.AgentHandler{Platform: agentplane.NewClient(s.URL, key), Handler: func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
		for _, name := range tools {
			args := map[string]any{"amount": 12.5, "card": map[string]any{"number": number, "holder": "Ann"}, "cvv": cvv}
			if _, err := req.Client().Tools().Invoke(ctx, name, args); err != nil {
				return st.Delta("error: " + err.Error())
			}
		}
		return st.Delta("ok")
	}})
}

// storeBytes is everything the database holds: the SQLite files (the WAL
// too), or a pg_dump of the test's schema.
func storeBytes(t *testing.T, dsn string) []byte {
	t.Helper()
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		var all []byte
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			b, err := os.ReadFile(p)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		if len(all) == 0 {
			t.Fatal("no database file")
		}
		return all
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	out, err := exec.Command("pg_dump", "--no-owner", "-n", schema, u.String()).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if !bytes.Contains(out, []byte("tool_calls")) {
		t.Fatalf("pg_dump has no tool_calls table:\n%.2000s", out)
	}
	return out
}

// Redacted argument values reach the tool and nothing else: not the tool
// call rows, events, approvals (args_summary) or audit rows in the
// database — the SQLite file bytes and a pg_dump are searched — nor the
// API the console reads, nor the server's logs.
func TestRedactedArgumentsAppearNowhere(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		const number, cvv = "4111-5555-SECRET-0042", "cvv-SECRET-917"
		s := startServer(t, dsn)
		tool := newSecretTool(t)
		putTool(t, s, "card.charge", cardTool(tool.URL, alwaysApproval))
		putTool(t, s, "card.check", cardTool(tool.URL, map[string]any{"decision": "allow"}))
		startSecretAgent(t, s, "shop", number, cvv, "card.charge", "card.check")

		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "shop", "message": map[string]any{"role": "user", "content": "pay the usual way"}})
		msgs := c.readUntilAll("approval", isType("approval_required"))
		ap := find(t, msgs, "approval_required", isType("approval_required"))
		summary := sv(ap, "args_summary")
		if !strings.Contains(summary, `"[redacted]"`) || strings.Contains(summary, number) || !strings.Contains(summary, "amount=12.5") {
			t.Fatalf("args_summary = %q", summary)
		}
		c.send(map[string]any{"type": "approval_decision", "request_id": "d", "run_id": sv(ap, "run_id"), "approval_id": sv(ap, "approval_id"), "decision": "approve"})
		end := c.untilEnd()
		if last := end[len(end)-1]; last["type"] != "done" || text(end) != "ok" {
			t.Fatalf("run ended %v: %q", last, text(end))
		}
		got := tool.got()
		if len(got) != 2 {
			t.Fatalf("the tool ran %d times", len(got))
		}
		for _, a := range got {
			if obj(a, "card")["number"] != number || a["cvv"] != cvv || obj(a, "card")["holder"] != "Ann" {
				t.Fatalf("the tool got %v, want the real values", a)
			}
		}

		// What the console reads.
		sid, runID := sv(ap, "session_id"), sv(ap, "run_id")
		var seen []byte
		for _, path := range []string{"/v1/sessions/" + sid + "/events", "/v1/runs/" + runID + "/events", "/v1/approvals?status=APPROVED", "/v1/audit",
			"/v1/sessions/" + sid + "/messages", "/v1/sessions", "/v1/runs?session_id=" + sid, "/v1/runs/" + runID, "/v1/runs/" + runID + "/tree", "/v1/usage"} {
			code, _, body := rawCall(t, s, "GET", path, adminKey, nil)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, code, body)
			}
			seen = append(seen, body...)
		}
		var created []map[string]any
		for _, e := range s.events("/v1/sessions/" + sid + "/events") {
			if e["type"] == "tool_call_created" {
				created = append(created, e)
				code, _, body := rawCall(t, s, "GET", "/v1/tool_calls/"+sv(payload(e), "tool_call_id"), adminKey, nil)
				if code != http.StatusOK {
					t.Fatalf("tool call: %d", code)
				}
				seen = append(seen, body...)
			}
		}
		if len(created) != 2 || obj(obj(payload(created[0]), "args"), "card")["number"] != "[redacted]" || obj(payload(created[0]), "args")["cvv"] != "[redacted]" ||
			obj(obj(payload(created[0]), "args"), "card")["holder"] != "Ann" {
			t.Fatalf("tool_call_created = %v", created)
		}
		for _, secret := range []string{number, cvv} {
			if bytes.Contains(seen, []byte(secret)) {
				t.Fatalf("the API showed %q", secret)
			}
		}
		s.stop()
		for _, secret := range []string{number, cvv} {
			if strings.Contains(s.output(), secret) {
				t.Fatalf("the server logged %q:\n%s", secret, s.output())
			}
		}
		db := storeBytes(t, dsn)
		for _, secret := range []string{number, cvv} {
			if bytes.Contains(db, []byte(secret)) {
				t.Fatalf("the database holds %q", secret)
			}
		}
		if !bytes.Contains(db, []byte("[redacted]")) {
			t.Fatal("the database holds no redacted call (the test proves nothing)")
		}
	})
}

// With replicas, a redacted call approved through another replica is sent
// by the replica that holds its real arguments (it hears of the dispatch);
// once that process is gone (killed and restarted: a new process under the
// same instance id), an approved call cannot be sent and ends FAILED with
// args_unavailable — never sent with "[redacted]" in it.
func TestRedactedCallsAcrossReplicas(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "rd-a")
	b := startServer(t, dsn, "--instance-id", "rd-b")
	tool := newSecretTool(t)
	putTool(t, a, "card.charge", cardTool(tool.URL, alwaysApproval))
	ga := startGoToolAgent(t, a, "holder")

	c := dial(t, b, "alice", "alice-key")
	c.invokeSpec("holder", "", map[string]any{"hold": true})
	runID := ga.held(t)
	invoke := func() string {
		t.Helper()
		code, v := a.call("POST", "/v1/tools/card.charge:invoke", ga.key, map[string]any{"run_id": runID,
			"args": map[string]any{"amount": 1, "card": map[string]any{"number": "4000-SECRET"}, "cvv": "123"}}, "x-run-id", runID)
		if code != http.StatusOK || v["status"] != "pending" {
			t.Fatalf("invoke: %d %v", code, v)
		}
		return sv(v, "tool_call_id")
	}
	decideOnB := func(callID string) {
		t.Helper()
		ap := sv(toolCall(t, b, callID), "approval_id")
		if code, body := b.call("POST", "/v1/approvals/"+ap+":decide", adminKey, map[string]any{"decision": "approve"}); code != http.StatusOK {
			t.Fatalf("decide on b: %d %v", code, body)
		}
	}
	waitState := func(callID, state string) map[string]any {
		t.Helper()
		var v map[string]any
		deadline := time.Now().Add(30 * time.Second)
		for v = toolCall(t, b, callID); sv(v, "state") != state; v = toolCall(t, b, callID) {
			if time.Now().After(deadline) {
				t.Fatalf("tool call %s is %v, not %s\nreplica a:\n%s\nreplica b:\n%s", callID, v, state, a.output(), b.output())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return v
	}

	first := invoke()
	decideOnB(first)
	waitState(first, "SUCCEEDED")
	if got := tool.got(); len(got) != 1 || obj(got[0], "card")["number"] != "4000-SECRET" {
		t.Fatalf("the tool got %v", got)
	}

	second := invoke()
	a.kill()
	a.restart()
	decideOnB(second)
	v := waitState(second, "FAILED")
	if e := obj(v, "error"); sv(e, "code") != "args_unavailable" {
		t.Fatalf("the unsendable call ended %v", v)
	}
	if n := len(tool.got()); n != 1 {
		t.Fatalf("the tool ran %d times; the second call must never be sent", n)
	}
	ga.releaseAll()
	waitRunEnded(t, b, runID)
}

// An MCP server's tool redacts through its per-tool override: the stored
// call and its events carry "[redacted]", the MCP server gets the value
// (its sum proves it).
func TestRedactedMCPArguments(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		g := newGoMCPServer(t)
		s := startServer(t, dsn)
		putMCPServer(t, s, "calc", map[string]any{"transport": "streamable_http", "url": g.URL})
		waitMCPTools(t, s, "calc", "add", "hold")
		putTool(t, s, "calc@add", map[string]any{"redact": []any{"a"}})
		startGoToolAgent(t, s, "mcp-redact")
		c := dial(t, s, "alice", "alice-key")
		started := c.invokeSpec("mcp-redact", "", map[string]any{"tool": "calc@add", "args": map[string]any{"a": 4000, "b": 2}})
		if res := singleResult(t, c.untilEnd()); num(obj(res, "structuredContent"), "sum") != 4002 {
			t.Fatalf("add: %v", res)
		}
		for _, e := range s.events("/v1/sessions/" + sv(started, "session_id") + "/events") {
			if e["type"] == "tool_call_created" {
				if args := obj(payload(e), "args"); args["a"] != "[redacted]" || args["b"] != float64(2) {
					t.Fatalf("tool_call_created args = %v", args)
				}
				if a := obj(toolCall(t, s, sv(payload(e), "tool_call_id")), "args"); a != nil {
					t.Fatalf("the tool call view shows args: %v", a)
				}
				return
			}
		}
		t.Fatal("no tool_call_created")
	})
}
