package ingress

import (
	"encoding/json"
	"testing"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// TestInputRequiredMessages (issue 10): a root run's question reaches
// clients as input_required; a child's stays internal (its caller answers
// it; clients get sub_agent_complete with status input_required);
// agent_invoke takes new_intention.
func TestInputRequiredMessages(t *testing.T) {
	root := &store.Event{EventID: "e1", SessionID: "s", Seq: 7, RunID: "r", TS: 1, Type: eventlog.TypeInputRequired, Payload: json.RawMessage(`{"question":"Which city?"}`)}
	var m map[string]any
	if err := json.Unmarshal(ClientMessage(root), &m); err != nil {
		t.Fatal(err)
	}
	if m["type"] != "input_required" || m["question"] != "Which city?" || m["run_id"] != "r" || m["seq"] != float64(7) {
		t.Errorf("root message %v", m)
	}
	child := *root
	child.ParentRunID = "p"
	if b := ClientMessage(&child); b != nil {
		t.Errorf("a child's input_required reached clients: %s", b)
	}
	complete := store.Event{EventID: "e2", SessionID: "s", Seq: 6, RunID: "c", ParentRunID: "p", Type: eventlog.TypeSubAgentComplete,
		Payload: json.RawMessage(`{"agent_id":"w","status":"input_required","question":"Which city?"}`)}
	if b := ClientMessage(&complete); b == nil {
		t.Error("the child's sub_agent_complete was dropped")
	}
	for data, want := range map[string]bool{
		`{"type":"agent_invoke","agent_id":"a","message":{"role":"user","content":"hi"},"new_intention":true}`: true,
		`{"type":"agent_invoke","agent_id":"a","message":{"role":"user","content":"hi"}}`:                      false,
	} {
		c, bad := decodeCommand([]byte(data))
		if bad != nil || c.NewIntention != want {
			t.Errorf("%s: %+v %+v", data, c, bad)
		}
	}
}
