package mcpserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/toolsvc"
)

// A client ending its MCP session (ClientSession.Close: DELETE /mcp) while
// one of its tools/calls waits is answered at once: the SDK's session close
// waits for the session's handlers, and a pending call — an approval may
// take hours — held the DELETE, and the session, until the call ended.
// The tool call goes on, as for a connection that drops.
func TestCloseSessionWithPendingCall(t *testing.T) {
	e := newEndpoint(t)
	progress := make(chan struct{}, 100)
	cs := e.connect(t, e.run1.RunID, func(*mcp.ProgressNotificationParams) { progress <- struct{}{} })
	sessionID := cs.ID()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "srv__slow", Arguments: map[string]any{}, Meta: mcp.Meta{"progressToken": "p"}})
		done <- err
	}()
	select {
	case <-progress: // the call is pending
	case <-time.After(10 * time.Second):
		t.Fatal("no progress while the call was pending")
	}

	// The go-sdk client gives its DELETE 5 s, then drops it quietly: time it
	// with a DELETE of our own, the way any client sends it.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "DELETE", e.url, nil)
	req.Header.Set("Authorization", "Bearer "+agentKey)
	req.Header.Set("x-run-id", e.run1.RunID)
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("DELETE /mcp with a call pending: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp: %d", resp.StatusCode)
	}
	if status, _, body := e.post(t, e.run1.RunID, sessionID, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`); status != http.StatusNotFound {
		t.Fatalf("the deleted session answered %d %s", status, body)
	}
	closed := make(chan error, 1)
	go func() { closed <- cs.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("ClientSession.Close hangs")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's CallTool hangs after Close")
	}

	// The tool call was not cancelled: released, it succeeds.
	callID := ""
	for _, l := range e.logs.lines() {
		if id, _ := l["tool_call_id"].(string); id != "" {
			callID = id
		}
	}
	who := toolsvc.Caller{AgentID: "agent-a"}
	if v, err := e.svc.Get(context.Background(), who, callID); err != nil || v.Status != toolsvc.StatusPending {
		t.Fatalf("the tool call %q after the session ended: %+v %v", callID, v, err)
	}
	e.release <- struct{}{}
	v, err := e.svc.Wait(context.Background(), who, callID, 10*time.Second)
	if err != nil || v.Status != toolsvc.StatusSucceeded {
		t.Fatalf("the tool call after its release: %+v %v", v, err)
	}
}
