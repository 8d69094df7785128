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

// RunEndOutlook reports each of a run's children, open tool calls and LLM
// calls on its own, and only the run's own: another run's rows, an ended
// tool call and other events of the run do not count.
func TestRunEndOutlook(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		run, err := s.RunGet(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		want := func(step string, w store.RunOutlook) {
			t.Helper()
			got, err := s.RunEndOutlook(ctx, run)
			if err != nil || *got != w {
				t.Fatalf("%s: outlook = %+v, %v; want %+v", step, got, err, w)
			}
		}
		// A sibling root run in another session has everything; this run
		// has nothing yet, though it has events of other types.
		osid, orid := newRun(t, s)
		insertRun(t, s, &store.RunInsertParams{SessionID: osid, AgentID: "b", ParentRunID: orid, RootRunID: orid, Depth: 1, StartedAt: 2})
		insertCall(t, s, osid, orid, "")
		appendEvent := func(session, runID, typ string) {
			t.Helper()
			if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: session, RunID: runID, TS: 3, Type: typ, Payload: json.RawMessage(`{}`)}}); err != nil {
				t.Fatal(err)
			}
		}
		appendEvent(osid, orid, "llm_call_done")
		appendEvent(sid, rid, "agent_stream_delta")
		appendEvent(sid, rid, "llm_call_started")
		want("nothing", store.RunOutlook{})

		c := insertCall(t, s, sid, rid, "")
		want("open tool call", store.RunOutlook{OpenToolCalls: true})
		if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{c.Status}, Status: store.ToolCallCancelled, At: 20,
			Error: json.RawMessage(`{"code":"cancelled"}`)}); err != nil {
			t.Fatal(err)
		}
		want("tool call ended", store.RunOutlook{})

		appendEvent(sid, rid, "llm_call_done")
		want("LLM call", store.RunOutlook{LLMCalls: true})

		child := insertRun(t, s, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: rid, RootRunID: rid, Depth: 1, StartedAt: 4})
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: child.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: 5}); err != nil {
			t.Fatal(err)
		}
		want("ended child", store.RunOutlook{Children: true, LLMCalls: true})
	})
}

// RunEndTransition, in a transaction as a run's end uses it: the ended run
// with its outlook; on a run already ended, the current row and
// ErrConflict, with the transaction still usable.
func TestRunEndTransition(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		insertRun(t, s, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "b", ParentRunID: rid, RootRunID: rid, Depth: 1, StartedAt: 4})
		end := &store.RunTransitionParams{RunID: rid, From: store.RunActiveStatuses, Status: store.RunDone, At: 9}
		err := s.InTx(ctx, func(tx store.Queries) error {
			r, look, err := tx.RunEndTransition(ctx, end, sid)
			if err != nil {
				return err
			}
			if r.Status != store.RunDone || r.EndedAt != 9 || look == nil || *look != (store.RunOutlook{Children: true}) {
				t.Fatalf("ended run %+v, outlook %+v", r, look)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(tx store.Queries) error {
			r, look, err := tx.RunEndTransition(ctx, &store.RunTransitionParams{RunID: rid, From: store.RunActiveStatuses, Status: store.RunFailed, At: 10}, sid)
			if !errors.Is(err, store.ErrConflict) || r == nil || r.Status != store.RunDone || look != nil {
				t.Fatalf("second end: %+v, %+v, %v; want the DONE row and ErrConflict", r, look, err)
			}
			_, err = tx.RunGet(ctx, rid)
			return err
		})
		if err != nil {
			t.Fatalf("the transaction after a conflicting end: %v", err)
		}
	})
}
