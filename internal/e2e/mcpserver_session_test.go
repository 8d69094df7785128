package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The platform's /mcp server against a real agentplane, on both stores:
// what an agent's MCP client sees when it ends its session while a call
// waits for approval, and many calls at once on one session.

// A client that ends its MCP session (DELETE /mcp, what ClientSession.Close
// sends) while a tools/call waits for a human's approval is answered at
// once; before, the go-sdk's session close waited for the call — hours, for
// an approval — and the DELETE hung with it. The call goes on: approved
// later, it runs once.
func TestMCPDeleteSessionWhileApprovalPending(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "pay.transfer", transferTool(te.URL, "return_to_agent", alwaysApproval))
		ga := startGoToolAgent(t, s, "go-tools")
		c := dial(t, s, "alice", "alice-key")
		c.invokeSpec("go-tools", "", map[string]any{"hold": true})
		runID := ga.held(t)

		cs := connectMCP(t, s, ga.key, runID, nil)
		errc := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay__transfer", Arguments: map[string]any{"amount": 5, "to": "bob"}})
			errc <- err
		}()
		msgs := c.readUntilAll("approval_required", isType("approval_required"))
		ap := find(t, msgs, "approval_required", isType("approval_required"))

		req, _ := http.NewRequestWithContext(ctxTimeout(t, 4*time.Second), "DELETE", s.URL+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+ga.key)
		req.Header.Set("x-run-id", runID)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("DELETE /mcp while a call waits for approval: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE /mcp: %d", resp.StatusCode)
		}
		go cs.Close()
		select {
		case <-errc:
		case <-time.After(30 * time.Second):
			t.Fatal("the client's call never returned after its session ended")
		}

		// Not cancelled: still waiting for its approval, which runs it once.
		if tc := toolCall(t, s, sv(ap, "tool_call_id")); tc["state"] != "WAITING_APPROVAL" {
			t.Fatalf("the call after its session ended: %v", tc)
		}
		c.send(map[string]any{"type": "approval_decision", "request_id": "d1", "run_id": runID, "approval_id": ap["approval_id"], "decision": "approve"})
		waitUntil(t, "the approved call to succeed", func() bool { return toolCall(t, s, sv(ap, "tool_call_id"))["state"] == "SUCCEEDED" })
		assertExecutions(t, te, 1)

		ga.releaseAll()
		waitRunEnded(t, s, runID)
		assertSettled(t, dsn)
	})
}

// Many tools/calls at once on one session, with large non-ASCII args: each
// answered with its own result, each run once.
func TestMCPConcurrentCallsOneSession(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s, te, ga, runID, cs := echoOverMCP(t, dsn)

		const n = 16
		big := strings.Repeat("héllo wörld ✓ 日本語 🎉 \u2028", 2000)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[string]bool{}
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				want := fmt.Sprintf("%d:%s", i, big)
				res, err := cs.CallTool(ctxTimeout(t, 60*time.Second), &mcp.CallToolParams{Name: "srv.echo", Arguments: map[string]any{"s": want}})
				if err != nil || res.IsError {
					t.Errorf("call %d: %+v %v", i, res, err)
					return
				}
				sc, _ := res.StructuredContent.(map[string]any)
				if got := sv(obj(sc, "args"), "s"); got != want {
					t.Errorf("call %d answered %.80q", i, got)
				}
				mu.Lock()
				ids[fmt.Sprint(res.Meta["agentplane/tool_call_id"])] = true
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		if len(ids) != n {
			t.Fatalf("%d distinct tool calls for %d calls", len(ids), n)
		}
		assertExecutions(t, te, n)
		ga.releaseAll()
		waitRunEnded(t, s, runID)
		assertSettled(t, dsn)
	})
}

// A tools/call's arguments are bounded as :invoke's are (1 MiB, docs/API.md
// Limits): before, /mcp took up to the MCP SDK's 4 MiB and stored and ran
// what :invoke refuses with 413. Over the bound it is an isError result the
// model can read, nothing is stored or run, and the session goes on (an
// HTTP 413 would end the go-sdk client's session).
func TestMCPToolCallArgsBound(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s, te, ga, runID, cs := echoOverMCP(t, dsn)

		big := map[string]any{"s": strings.Repeat("é", 600_000)} // 1.2 MB of JSON
		if code, body := s.call("POST", "/v1/tools/srv.echo:invoke", ga.key, map[string]any{"run_id": runID, "args": big}, "x-run-id", runID); code != http.StatusRequestEntityTooLarge {
			t.Fatalf(":invoke with those args: %d %v", code, body)
		}
		res, err := cs.CallTool(ctxTimeout(t, 60*time.Second), &mcp.CallToolParams{Name: "srv__echo", Arguments: big})
		if err != nil || !res.IsError {
			t.Fatalf("tools/call with args over 1 MiB: %+v %v", res, err)
		}
		if sc, _ := res.StructuredContent.(map[string]any); sv(obj(sc, "error"), "code") != "request_too_large" || obj(sc, "error")["tool_call_id"] != nil {
			t.Fatalf("tools/call with args over 1 MiB answered %v", res.StructuredContent)
		}
		assertExecutions(t, te, 0)
		if evs := sessionEventsOf(t, s, sv(toolRunOf(t, s, runID), "session_id"), "tool_call_created"); len(evs) != 0 {
			t.Fatalf("a call over the bound was recorded: %v", evs)
		}

		// Just under the bound, non-ASCII: taken, and the session went on.
		under := strings.Repeat("日本語 ✓ ", 60_000) // ~0.7 MB
		res, err = cs.CallTool(ctxTimeout(t, 60*time.Second), &mcp.CallToolParams{Name: "srv__echo", Arguments: map[string]any{"s": under}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call under the bound: %v %v", res, err)
		}
		if sc, _ := res.StructuredContent.(map[string]any); sv(obj(sc, "args"), "s") != under {
			t.Fatalf("the args came back changed")
		}
		assertExecutions(t, te, 1)
		if evs := sessionEventsOf(t, s, sv(toolRunOf(t, s, runID), "session_id"), "tool_call_created"); len(evs) != 1 {
			t.Fatalf("%d tool_call_created events, want the one under the bound", len(evs))
		}
		ga.releaseAll()
		waitRunEnded(t, s, runID)
		assertSettled(t, dsn)
	})
}

// toolRunOf reads a run as the admin.
func toolRunOf(t *testing.T, s *server, runID string) map[string]any {
	t.Helper()
	code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
	if code != http.StatusOK {
		t.Fatalf("GET run %s: %d %v", runID, code, run)
	}
	return run
}

// echoOverMCP starts a server with the server tool srv.echo and a Go agent
// whose run is held, and opens an MCP session of that run.
func echoOverMCP(t *testing.T, dsn string) (*server, *toolEndpoint, *goToolAgent, string, *mcp.ClientSession) {
	t.Helper()
	s := startServer(t, dsn)
	te := newToolEndpoint(t)
	putTool(t, s, "srv.echo", map[string]any{"kind": "server", "description": "Echoes its args.", "endpoint": te.URL,
		"parameters": map[string]any{"type": "object"}})
	ga := startGoToolAgent(t, s, "go-tools")
	c := dial(t, s, "alice", "alice-key")
	c.invokeSpec("go-tools", "", map[string]any{"hold": true})
	runID := ga.held(t)
	return s, te, ga, runID, connectMCP(t, s, ga.key, runID, nil)
}
