package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// DoAlongside ops of several sessions in one group commit (run at the same
// time on PostgreSQL, in turn on SQLite) each get their own events back,
// every session's seqs are consecutive in its submission order, and all of
// it is one transaction. An op that fails is isolated as with Do: its
// neighbours commit.
func TestDoAlongsideOpsShareACommit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := &txCounter{Store: testdb.Open(t, dialect)}
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		const sessions, perSession = 4, 3
		var sids []string
		for range sessions {
			sids = append(sids, session(t, st))
		}
		release := holdWriter(t, l, session(t, st))

		type result struct {
			evs []store.Event
			err error
		}
		results := make([][]result, sessions)
		var wg sync.WaitGroup
		queued := 0
		boom := errors.New("boom")
		for k := range perSession {
			for s, sid := range sids {
				if k == 0 {
					results[s] = make([]result, perSession)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					evs, err := l.DoAlongside(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
						// A read of the session's own row, as a tool step's
						// lock of its run: waited for.
						if _, err := tx.SessionGet(ctx, sid); err != nil {
							return nil, err
						}
						if s == 1 && k == 1 {
							return nil, boom
						}
						return []store.EventParams{ev(sid, "step", k), ev(sid, "step", 10+k)}, nil
					})
					results[s][k] = result{evs, err}
				}()
				queued++
				waitQueued(t, l, queued) // submitted in this order
			}
		}
		before := st.txs.Load()
		release()
		wg.Wait()
		txs := st.txs.Load() - before

		for s, sid := range sids {
			want := int64(1)
			for k := range perSession {
				r := results[s][k]
				if s == 1 && k == 1 {
					if !errors.Is(r.err, boom) {
						t.Fatalf("the failing op: %v, want boom", r.err)
					}
					continue
				}
				if r.err != nil {
					t.Fatalf("session %d op %d failed with its neighbour: %v", s, k, r.err)
				}
				if len(r.evs) != 2 {
					t.Fatalf("session %d op %d got %d events back, want its 2", s, k, len(r.evs))
				}
				for i, e := range r.evs {
					var p struct{ N int }
					_ = json.Unmarshal(e.Payload, &p)
					if e.SessionID != sid || e.Seq != want || p.N != k+10*i {
						t.Fatalf("session %d op %d event %d: session %s seq %d n %d, want %s %d %d", s, k, i, e.SessionID, e.Seq, p.N, sid, want, k+10*i)
					}
					want++
				}
			}
			stored, err := st.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if n := int64(len(stored)); n != want-1 {
				t.Fatalf("session %d: %d events stored, want %d", s, n, want-1)
			}
			assertConsecutive(t, stored, 1)
		}
		// The batch failed once (the bad op), then halves: a handful, not
		// one per op.
		if txs < 1 || txs > 10 {
			t.Fatalf("%d transactions for %d ops", txs, sessions*perSession)
		}
	})
}
