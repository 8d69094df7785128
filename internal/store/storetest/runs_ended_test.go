package storetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// RunsEnded names exactly the asked runs in a terminal state — each of the
// four — whatever else is asked (active runs, paused ones, unknown ids,
// repeats), on both databases; with none ended it answers an empty map.
func TestRunsEnded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		runs := map[string]string{} // status → run id
		for i, status := range []string{store.RunRunning, store.RunPausedWaitingApproval, store.RunDone, store.RunFailed, store.RunCancelled, store.RunInputRequired} {
			r := insertRun(t, s, &store.RunInsertParams{SessionID: newSession(t, s), AgentID: "a", StartedAt: int64(i + 1)})
			if status != store.RunRunning {
				if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: status, At: int64(i + 2)}); err != nil {
					t.Fatalf("%s: %v", status, err)
				}
			}
			runs[status] = r.RunID
		}
		active := []string{runs[store.RunRunning], runs[store.RunPausedWaitingApproval], "run_unknown"}
		if got, err := s.RunsEnded(ctx, append(active, active[0])); err != nil || len(got) != 0 {
			t.Fatalf("no run ended: %v, %v", got, err)
		}
		ask := append([]string{}, active...)
		want := map[string]bool{}
		for _, status := range []string{store.RunDone, store.RunFailed, store.RunCancelled, store.RunInputRequired} {
			ask = append(ask, runs[status], runs[status])
			want[runs[status]] = true
		}
		got, err := s.RunsEnded(ctx, ask)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("RunsEnded = %v, want %v", got, want)
		}
	})
}
