package run

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A start in a session this process saw last does not read the session
// and its newest run first on PostgreSQL: it has the store check them
// (store.SessionAssumer). When another process moved the session on
// meanwhile — here it asked a question this start must answer — the check
// fails and the start reads first: the answer resumes the other process's
// run, as if nothing had been assumed. SQLite reads first always.
func TestStartAssumesSessionAsSeen(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		h.agent("w", nil, "", weather)
		counts := countStatements(t, h.st, "agentplane_session_as_seen", "FROM session_purges p WHERE p.session_id = s.session_id")
		want := func(step string, wantAssumed, wantRead int) {
			t.Helper()
			if dialect != "postgres" {
				wantAssumed, wantRead = 0, 1
			}
			if got := counts(); got != [2]int{wantAssumed, wantRead} {
				t.Fatalf("%s: %d assumed, %d read; want %d, %d", step, got[0], got[1], wantAssumed, wantRead)
			}
		}
		// seen waits until this process has seen runID end (its end
		// commits before the manager hears of it).
		seen := func(r *store.Run) *store.Run {
			t.Helper()
			r = waitEnded(t, h.st, r.RunID)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
				h.m.seen.mu.Lock()
				s := h.m.seen.m[r.SessionID]
				h.m.seen.mu.Unlock()
				if s.run.RunID == r.RunID && s.run.Status == r.Status {
					return r
				}
				if time.Now().After(deadline) {
					t.Fatalf("run %s %s not seen ended: %+v", r.RunID, r.Status, s.run)
				}
			}
		}

		// A new session is read; the answer in it is assumed.
		asked := seen(h.start("w", "weather please"))
		want("new session", 0, 1)
		answer := seen(h.startIn(asked.SessionID, "w", "Paris", false))
		want("answer", 1, 0)
		if answer.Status != store.RunDone || answer.ResumesRunID != asked.RunID || answer.IntentionID != asked.IntentionID {
			t.Fatalf("answer %+v, want it to resume %s", answer, asked.RunID)
		}

		// Another process asks in the session; this one did not see it.
		otherLog := eventlog.New(h.st, eventlog.Options{})
		other := New(otherLog, Options{InstanceID: "other", Invoker: loopbackInvoker(t), HeartbeatInterval: time.Hour})
		if err := other.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			other.Shutdown(context.Background())
			otherLog.Stop()
		}()
		s, err := other.StartRun(context.Background(), StartParams{UserID: "alice", SessionID: asked.SessionID, AgentID: "w", Message: agent.Message{Role: "user", Content: "weather again"}})
		if err != nil {
			t.Fatal(err)
		}
		askedElsewhere := waitEnded(t, h.st, s.Run.RunID)
		if askedElsewhere.Status != store.RunInputRequired {
			t.Fatalf("the other process's run %+v", askedElsewhere)
		}
		want("the other process", 0, 1)
		answer = seen(h.startIn(asked.SessionID, "w", "Paris", false))
		want("answer after the other process asked", 1, 1)
		if answer.ResumesRunID != askedElsewhere.RunID || answer.IntentionID != askedElsewhere.IntentionID {
			t.Fatalf("answer %+v, want it to resume %s", answer, askedElsewhere.RunID)
		}

		// Another user's start is not assumed from what alice's saw.
		if _, err := h.m.StartRun(context.Background(), StartParams{UserID: "bob", SessionID: asked.SessionID, AgentID: "w", Message: agent.Message{Role: "user", Content: "x"}}); err == nil || !strings.Contains(err.Error(), "session_not_found") {
			t.Fatalf("bob's start: %v, want session_not_found", err)
		}
		want("another user", 0, 1)
	})
}
