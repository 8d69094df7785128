package eventlog

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// callerStack is the goroutine's own stack.
func callerStack() string {
	buf := make([]byte, 64<<10)
	return string(buf[:runtime.Stack(buf, false)])
}

// An op its submitter waits for commits on the submitter's goroutine when
// the writer is idle (no hand-off to the loop and back); one submitted
// while another is pending goes through the loop, behind it.
func TestWaitedOpCommitsInlineWhenIdle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{BehindLinger: -1})
		defer l.Stop()
		sid := session(t, st)
		ctx := context.Background()
		var stack string
		if _, err := l.Do(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
			stack = callerStack()
			return []store.EventParams{ev(sid, "inline", 1)}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stack, "(*writer).loop") || !strings.Contains(stack, "TestWaitedOpCommitsInlineWhenIdle") {
			t.Fatalf("an idle log's Do ran on another goroutine:\n%s", stack)
		}

		// A pending op (held in its transaction here) makes the next
		// waited op queue behind it.
		hold, release := make(chan struct{}), make(chan struct{})
		if err := l.AppendAsync(ctx, nil, ev(sid, "first", 2)); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = l.Do(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
				close(hold)
				<-release
				return []store.EventParams{ev(sid, "held", 3)}, nil
			})
		}()
		<-hold
		w := l.shardFor(sid)
		pendingBefore := w.pending.Load()
		done := make(chan []store.Event, 1)
		go func() {
			evs, err := l.Do(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
				stack = callerStack()
				return []store.EventParams{ev(sid, "queued", 4)}, nil
			})
			if err != nil {
				t.Error(err)
			}
			done <- evs
		}()
		// Released only once the op is queued: released earlier, the held
		// op may end first and the writer be idle again when it arrives.
		for deadline := time.Now().Add(10 * time.Second); w.pending.Load() <= pendingBefore; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the second op never queued")
			}
		}
		close(release)
		evs := <-done
		if !strings.Contains(stack, "(*writer).loop") {
			t.Fatalf("an op submitted while another was pending committed inline:\n%s", stack)
		}
		all, err := st.EventsList(ctx, &store.EventsListParams{SessionID: sid, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range all {
			types = append(types, e.Type)
		}
		if got := strings.Join(types, ","); got != "inline,first,held,queued" || evs[0].Type != "queued" {
			t.Fatalf("order %s", got)
		}
	})
}

// Whatever commits inline, an op never commits before one submitted
// earlier in its session: each goroutine queues an append nobody waits for
// (async, or write-behind that lingers for company) and then an op it
// waits for, many at once; every waited op's seq is after its own
// goroutine's earlier append.
func TestInlineNeverOvertakesAnEarlierSubmit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sids := []string{session(t, st), session(t, st), session(t, st)}
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sid := sids[g%len(sids)]
				for i := range 25 {
					firstSeq := make(chan int64, 1)
					done := func(evs []store.Event, err error) {
						if err != nil {
							t.Error(err)
							firstSeq <- -1
							return
						}
						firstSeq <- evs[0].Seq
					}
					var err error
					if i%3 == 0 {
						err = l.AppendBehind(ctx, done, ev(sid, "behind", i))
					} else {
						err = l.AppendAsync(ctx, done, ev(sid, "async", i))
					}
					if err != nil {
						t.Error(err)
						return
					}
					evs, err := l.Do(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
						return []store.EventParams{ev(sid, "waited", i)}, nil
					})
					if err != nil {
						t.Error(err)
						return
					}
					if first := <-firstSeq; evs[0].Seq <= first {
						t.Errorf("waited op seq %d committed before its goroutine's earlier append (seq %d)", evs[0].Seq, first)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}
