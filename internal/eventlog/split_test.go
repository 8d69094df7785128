package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// txCounter counts the write transactions the log opens.
type txCounter struct {
	store.Store
	txs atomic.Int64
}

func (c *txCounter) InTx(ctx context.Context, fn func(tx store.Queries) error) error {
	c.txs.Add(1)
	return c.Store.InTx(ctx, fn)
}

// One failing op in a large batch must not cost one transaction per op (a
// batch holds thousands when the writer is behind): the batch is retried in
// halves, its other ops all commit, in submission order.
func TestFailingOpInLargeBatchIsIsolatedByHalving(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := &txCounter{Store: testdb.Open(t, dialect)}
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, st)

		// Hold the writer inside a transaction while the batch queues up
		// behind it, so the whole batch is taken by the next commit.
		release := holdWriter(t, l, sid)

		const n = 512
		const bad = 300
		boom := errors.New("boom")
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			done := func(_ []store.Event, err error) { errs[i] = err; wg.Done() }
			if i == bad {
				// Submitted in order from this goroutine: AppendAsync and the
				// failing Do queue one after another.
				go func() {
					_, err := l.Do(ctx, sid, func(context.Context, store.Queries) ([]store.EventParams, error) { return nil, boom })
					done(nil, err)
				}()
				waitQueued(t, l, i+1)
				continue
			}
			if err := l.AppendAsync(ctx, done, ev(sid, "ok", i)); err != nil {
				t.Fatal(err)
			}
		}
		before := st.txs.Load()
		release()
		wg.Wait()
		txs := st.txs.Load() - before

		for i, err := range errs {
			if i == bad && !errors.Is(err, boom) {
				t.Fatalf("op %d: %v, want boom", i, err)
			}
			if i != bad && err != nil {
				t.Fatalf("op %d failed with its neighbour: %v", i, err)
			}
		}
		evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != n-1 {
			t.Fatalf("%d events, want %d", len(evs), n-1)
		}
		assertConsecutive(t, evs, 1)
		want := 0
		for i, e := range evs {
			var p struct{ N int }
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if want == bad {
				want++
			}
			if p.N != want {
				t.Fatalf("event %d is op %d, want op %d (submission order)", i, p.N, want)
			}
			want++
		}
		// One failed attempt, then two halves per level down to the bad op:
		// about 2·log2(512) = 18. Retrying each op alone would be 513.
		if txs > 30 {
			t.Fatalf("%d transactions for a batch of %d with one bad op", txs, n)
		}
	})
}

// waitQueued waits until n ops wait behind the one the test holds in its
// transaction (queued, or taken by the loop waiting for its turn).
func waitQueued(t *testing.T, l *Log, n int) {
	t.Helper()
	for range 10000 {
		if l.shards[0].pending.Load() >= int64(n)+1 {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatalf("queue did not reach %d ops", n)
}
