package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// RunEndQuiet (PostgreSQL) ends a quiet run as RunTransition would, with
// the statements after it; a run that was not active, or has a child, an
// open tool call or an LLM call, fails the transaction with
// ErrRunNotQuiet and nothing of it is kept — the run is not ended.
func TestRunEndQuiet(t *testing.T) {
	s := testdb.Open(t, "postgres")
	ctx := context.Background()
	usage := json.RawMessage(`{"words":3}`)
	endQuietly := func(sid, rid string, status string, errJSON json.RawMessage) (string, error) {
		t.Helper()
		msgID := ids.New("msg")
		return msgID, s.InTx(ctx, func(tx store.Queries) error {
			q, ok := tx.(store.RunQuietEnder)
			if !ok {
				t.Fatal("a PostgreSQL transaction does not offer RunEndQuiet")
			}
			if err := q.RunEndQuiet(ctx, &store.RunTransitionParams{RunID: rid, From: store.RunActiveStatuses, Status: status, At: 50, Error: errJSON, Usage: usage}, sid); err != nil {
				return err
			}
			_, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: msgID, SessionID: sid, RunID: rid, Role: "assistant", Content: "x", CreatedAt: 50})
			return err
		})
	}
	kept := func(sid, msgID string) bool {
		t.Helper()
		return messageKept(t, s, sid, msgID)
	}
	status := func(rid string) string {
		t.Helper()
		r, err := s.RunGet(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}

	// Quiet: ended with what RunTransition writes, in the same commit as
	// what follows it. Another run's child, call and LLM call do not count.
	sid, rid := newRun(t, s)
	osid, orid := newRun(t, s)
	insertRun(t, s, &store.RunInsertParams{SessionID: osid, AgentID: "b", ParentRunID: orid, RootRunID: orid, Depth: 1, StartedAt: 2})
	insertCall(t, s, osid, orid, "")
	if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: osid, RunID: orid, TS: 3, Type: "llm_call_done", Payload: json.RawMessage(`{}`)},
		{SessionID: sid, RunID: rid, TS: 3, Type: "llm_call_started", Payload: json.RawMessage(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	errJSON := json.RawMessage(`{"code":"agent_error","message":"m"}`)
	if id, err := endQuietly(sid, rid, store.RunFailed, errJSON); err != nil || !kept(sid, id) {
		t.Fatalf("quiet run: %v (message kept: %v)", err, kept(sid, id))
	}
	r, err := s.RunGet(ctx, rid)
	if err != nil {
		t.Fatal(err)
	}
	var gotErr map[string]string
	_ = json.Unmarshal(r.Error, &gotErr)
	if r.Status != store.RunFailed || r.EndedAt != 50 || gotErr["code"] != "agent_error" || string(r.Usage) != string(usage) {
		t.Fatalf("ended row %+v", r)
	}

	// Not active: it ended already.
	if id, err := endQuietly(sid, rid, store.RunDone, nil); !errors.Is(err, store.ErrRunNotQuiet) || kept(sid, id) || status(rid) != store.RunFailed {
		t.Fatalf("ended run: %v, want ErrRunNotQuiet (message kept: %v, status %s)", err, kept(sid, id), status(rid))
	}

	// Not quiet: each of a child (ended or not), an open tool call and an
	// LLM call fails it; an ended tool call does not.
	notQuiet := map[string]func(sid, rid string){
		"child": func(sid, rid string) {
			child := insertRun(t, s, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: rid, RootRunID: rid, Depth: 1, StartedAt: 4})
			if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: child.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: 5}); err != nil {
				t.Fatal(err)
			}
		},
		"open tool call": func(sid, rid string) { insertCall(t, s, sid, rid, "") },
		"LLM call": func(sid, rid string) {
			if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: sid, RunID: rid, TS: 3, Type: "llm_call_done", Payload: json.RawMessage(`{}`)}}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for what, mark := range notQuiet {
		sid, rid := newRun(t, s)
		mark(sid, rid)
		if id, err := endQuietly(sid, rid, store.RunDone, nil); !errors.Is(err, store.ErrRunNotQuiet) || kept(sid, id) || status(rid) != store.RunRunning {
			t.Fatalf("%s: %v, want ErrRunNotQuiet (message kept: %v, status %s)", what, err, kept(sid, id), status(rid))
		}
	}
	sid, rid = newRun(t, s)
	c := insertCall(t, s, sid, rid, "")
	if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{c.Status}, Status: store.ToolCallCancelled, At: 20,
		Error: json.RawMessage(`{"code":"cancelled"}`)}); err != nil {
		t.Fatal(err)
	}
	if id, err := endQuietly(sid, rid, store.RunDone, nil); err != nil || !kept(sid, id) || status(rid) != store.RunDone {
		t.Fatalf("ended tool call: %v (message kept: %v, status %s)", err, kept(sid, id), status(rid))
	}
}
