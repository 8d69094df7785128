package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// An instance id belongs to one live process (issue 8, item 12).
func TestInstanceClaim(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		claim := func(process string, at, aliveSince int64, takeOver *store.Instance) (*store.Instance, error) {
			return s.InstanceClaim(ctx, &store.InstanceClaimParams{InstanceID: "i1", Process: process, At: at, AliveSince: aliveSince, TakeOver: takeOver})
		}
		mustHold := func(process string, at int64) {
			t.Helper()
			got, err := s.InstanceGet(ctx, "i1")
			if err != nil || got.Process != process || got.HeartbeatAt != at {
				t.Fatalf("instance = %+v, %v; want held by %s at %d", got, err, process, at)
			}
		}
		if _, err := claim("p1", 100, 0, nil); err != nil {
			t.Fatalf("first claim: %v", err)
		}
		if _, err := claim("p1", 200, 150, nil); err != nil {
			t.Fatalf("the holder's heartbeat: %v", err)
		}
		mustHold("p1", 200)
		cur, err := claim("p2", 250, 150, nil)
		if !errors.Is(err, store.ErrConflict) || cur == nil || cur.Process != "p1" || cur.HeartbeatAt != 200 {
			t.Fatalf("claim of a fresh id held by another process: %+v, %v; want p1's row with ErrConflict", cur, err)
		}
		mustHold("p1", 200)
		// p2 watched the row and it did not move: it takes over.
		if _, err := claim("p2", 260, 150, cur); err != nil {
			t.Fatalf("take over: %v", err)
		}
		mustHold("p2", 260)
		// p1's next heartbeat finds the id gone to p2.
		if _, err := claim("p1", 270, 150, nil); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("heartbeat of the process that lost the id: %v, want ErrConflict", err)
		}
		// A take-over based on an old reading fails.
		if _, err := claim("p3", 280, 150, &store.Instance{InstanceID: "i1", Process: "p2", HeartbeatAt: 250}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("take over of a row that moved: %v, want ErrConflict", err)
		}
		mustHold("p2", 260)
		// A stale holder is replaced at once.
		if _, err := claim("p3", 1000, 900, nil); err != nil {
			t.Fatalf("claim of a stale id: %v", err)
		}
		mustHold("p3", 1000)
		// Release: only by the holder.
		if err := s.InstanceRelease(ctx, "i1", "p2"); err != nil {
			t.Fatal(err)
		}
		mustHold("p3", 1000)
		if err := s.InstanceRelease(ctx, "i1", "p3"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.InstanceGet(ctx, "i1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("released instance: %v, want ErrNotFound", err)
		}
	})
}

// Processes racing for one new id: exactly one gets it.
func TestInstanceClaimRace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		for round := range 5 {
			id := fmt.Sprintf("race-%d", round)
			var won atomic.Int32
			var wg sync.WaitGroup
			for p := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := s.InstanceClaim(ctx, &store.InstanceClaimParams{InstanceID: id, Process: fmt.Sprintf("p%d", p), At: 100, AliveSince: 50})
					switch {
					case err == nil:
						won.Add(1)
					case !errors.Is(err, store.ErrConflict):
						t.Errorf("claim: %v", err)
					}
				}()
			}
			wg.Wait()
			if won.Load() != 1 {
				t.Fatalf("round %d: %d processes hold the id, want 1", round, won.Load())
			}
		}
	})
}
