package ingress

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// After a subscribe, a pending tool request or approval reaches the client
// once: through the replay when its event comes after after_seq, as a
// seq-less reminder ("resent": true) only when it does not — a reconnecting
// client gets every event exactly once (DESIGN §2.1). Both used to be sent.
func TestSubscribeResendsOnlyWhatTheReplayDoesNot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		st := testdb.Open(t, dialect)
		log := eventlog.New(st, eventlog.Options{})
		tools := toolsvc.New(log, toolsvc.Options{})
		t.Cleanup(tools.Stop)
		_, url := serveIngressOn(t, log, Options{Tools: tools})

		sid := newUserSession(t, st)
		runID := ids.New("run")
		if _, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: runID, SessionID: sid, AgentID: "a1", UserID: "u", Owner: "t", StartedAt: 1}); err != nil {
			t.Fatal(err)
		}
		// Seqs 1 and 2: a client tool request and an approval; 3: a state;
		// 4 and 5: another of each. All four still wait.
		tcOld, aprOld := waitingClientCall(t, log, sid, runID), waitingApproval(t, log, sid, runID)
		if _, err := log.Append(ctx, store.EventParams{SessionID: sid, RunID: runID, TS: 1, Type: eventlog.TypeState, Payload: json.RawMessage(`{"state":"RUNNING"}`)}); err != nil {
			t.Fatal(err)
		}
		tcNew, aprNew := waitingClientCall(t, log, sid, runID), waitingApproval(t, log, sid, runID)
		all := []string{"approval_required " + aprNew, "approval_required " + aprOld, "tool_request " + tcNew, "tool_request " + tcOld}
		slices.Sort(all)

		for _, tc := range []struct {
			afterSeq         int64
			resent, replayed []string
		}{
			{2, sorted("tool_request "+tcOld, "approval_required "+aprOld), sorted("tool_request "+tcNew, "approval_required "+aprNew)},
			{0, nil, all},
			{5, all, nil}, // at or past the events: only the reminders
		} {
			c := helloConn(t, url)
			resent, replayed := subscribeAndRead(t, c, sid, tc.afterSeq, 5)
			if !slices.Equal(resent, tc.resent) || !slices.Equal(replayed, tc.replayed) {
				t.Errorf("after_seq %d: resent %v, replayed %v; want resent %v, replayed %v", tc.afterSeq, resent, replayed, tc.resent, tc.replayed)
			}
			c.Close()
		}
	})
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// subscribeAndRead subscribes c after afterSeq and reads until the replay
// has reached lastSeq and a marker sent after the subscribe is answered
// (the reminders are written before it is read). It returns the
// tool_request and approval_required messages, "type id", sorted: the
// reminders (no seq, resent) and those of the replay.
func subscribeAndRead(t *testing.T, c *websocket.Conn, sessionID string, afterSeq, lastSeq int64) (resent, replayed []string) {
	t.Helper()
	c.WriteJSON(map[string]any{"type": "subscribe", "request_id": "s", "session_id": sessionID, "after_seq": afterSeq})
	c.WriteJSON(map[string]any{"type": "marker", "request_id": "end"})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	seq, marked := afterSeq, false
	for seq < lastSeq || !marked {
		var m map[string]any
		if err := c.ReadJSON(&m); err != nil {
			t.Fatalf("after_seq %d: %v", afterSeq, err)
		}
		var id string
		switch m["type"] {
		case "error":
			if m["request_id"] != "end" {
				t.Fatalf("after_seq %d: %v", afterSeq, m)
			}
			marked = true
			continue
		case "tool_request":
			id, _ = m["tool_call_id"].(string)
		case "approval_required":
			id, _ = m["approval_id"].(string)
		}
		if s, ok := m["seq"].(float64); ok {
			seq = int64(s)
			if id != "" {
				replayed = append(replayed, m["type"].(string)+" "+id)
			}
		} else if m["resent"] == true && id != "" {
			resent = append(resent, m["type"].(string)+" "+id)
		} else {
			t.Fatalf("after_seq %d: unexpected %v", afterSeq, m)
		}
	}
	slices.Sort(resent)
	slices.Sort(replayed)
	return resent, replayed
}

// waitingClientCall records a client tool call waiting for its result, and
// its tool_request event, as the tool service does; it returns the call's id.
func waitingClientCall(t *testing.T, log *eventlog.Log, sessionID, runID string) string {
	t.Helper()
	ctx, st := context.Background(), log.Store()
	c, err := st.ToolCallInsert(ctx, &store.ToolCallInsertParams{ToolCallID: ids.New("tc"), RunID: runID, SessionID: sessionID, AgentID: "a1",
		ToolName: "ui.confirm", Kind: store.ToolKindClient, Args: json.RawMessage(`{}`), TimeoutMS: 60000, At: 1, Policy: json.RawMessage(`{"decision":"allow"}`)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute).UnixMilli()
	if _, err := st.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked},
		Via: store.ToolCallDispatched, Status: store.ToolCallWaitingClient, At: 2, DeadlineAt: &deadline}); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "args": map[string]any{}, "deadline_ts": deadline})
	if _, err := log.Append(ctx, store.EventParams{SessionID: sessionID, RunID: runID, TS: 2, Type: eventlog.TypeToolRequest, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	return c.ToolCallID
}

// waitingApproval records a tool call waiting for an approval, and the
// approval_created event, as the tool service does; it returns the
// approval's id.
func waitingApproval(t *testing.T, log *eventlog.Log, sessionID, runID string) string {
	t.Helper()
	ctx, st := context.Background(), log.Store()
	c, err := st.ToolCallInsert(ctx, &store.ToolCallInsertParams{ToolCallID: ids.New("tc"), RunID: runID, SessionID: sessionID, AgentID: "a1",
		ToolName: "pay.transfer", Kind: store.ToolKindServer, Args: json.RawMessage(`{}`), TimeoutMS: 60000, At: 1, Policy: json.RawMessage(`{"decision":"require_approval"}`)})
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Minute).UnixMilli()
	a, err := st.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: ids.New("apr"), ToolCallID: c.ToolCallID, RunID: runID, SessionID: sessionID,
		ToolName: c.ToolName, ArgsSummary: "pay.transfer()", ExpiresAt: expires, At: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked},
		Status: store.ToolCallWaitingApproval, At: 2, ApprovalID: &a.ApprovalID, DeadlineAt: &expires}); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"approval_id": a.ApprovalID, "tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "args_summary": a.ArgsSummary, "expires_at": expires})
	if _, err := log.Append(ctx, store.EventParams{SessionID: sessionID, RunID: runID, TS: 2, Type: eventlog.TypeApprovalCreated, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	return a.ApprovalID
}
