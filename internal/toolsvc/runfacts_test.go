package toolsvc

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
	"github.com/agentplane/agentplane/internal/tool"
)

// A run's facts are read once, but what changes is still decided in the
// call's transaction: an ended run takes no call, another agent is
// refused, and a run whose session was purged is forbidden, not an error.
func TestRunFactsKeepTheChecks(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newHarness(t, dialect)
		h.put(tool.Definition{Name: "echo", Parameters: []byte(`{"type":"object"}`)})
		r := h.newRun()
		if v := h.mustInvoke(r, "echo", `{}`); v.Status != "succeeded" {
			t.Fatalf("first call: %+v", v)
		}
		if h.svc.runs.get(r.RunID) == nil {
			t.Fatal("the run's facts were not kept")
		}
		if _, err := h.svc.Invoke(h.ctx, InvokeParams{AgentID: "agent-b", RunID: r.RunID, ToolName: "echo", Args: []byte(`{}`)}); !errors.Is(err, ErrRunForbidden) {
			t.Fatalf("another agent's call into the run: %v", err)
		}
		if _, err := h.st.RunTransition(h.ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.invoke(r, "echo", `{}`, ""); code(err) != "run_not_active" {
			t.Fatalf("a call after the run ended: %v", err)
		}
		if err := h.st.SessionPurgeBegin(h.ctx, &store.SessionPurgeBeginParams{SessionID: r.SessionID, Owner: "test", Reason: "test", At: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			var err error
			if _, done, err = h.st.SessionPurgeBatch(h.ctx, r.SessionID, 100); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.st.InTx(h.ctx, func(tx store.Queries) error { return tx.SessionPurgeFinish(h.ctx, r.SessionID, time.Now().UnixMilli()) }); err != nil {
			t.Fatal(err)
		}
		if _, err := h.invoke(r, "echo", `{}`, ""); !errors.Is(err, ErrRunForbidden) {
			t.Fatalf("a call into a purged run: %v", err)
		}
		if h.svc.runs.get(r.RunID) != nil {
			t.Fatal("a purged run's facts were kept")
		}
		if n := h.totalExecutions(); n != 1 {
			t.Fatalf("the tool ran %d times, want 1", n)
		}
	})
}

func TestRunFactsStayBounded(t *testing.T) {
	var f runFacts
	for i := range 3 * runFactsMax {
		f.put(&store.Run{RunID: fmt.Sprint("run_", i), SessionID: "s", Status: store.RunRunning})
		if len(f.m) > runFactsMax {
			t.Fatalf("%d runs kept, max %d", len(f.m), runFactsMax)
		}
	}
	last := f.get(fmt.Sprint("run_", 3*runFactsMax-1))
	if last == nil || last.SessionID != "s" || last.Status != "" {
		t.Fatalf("the last run's facts: %+v (status is not a fact)", last)
	}
}
