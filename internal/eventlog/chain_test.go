package eventlog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A chain's ops queued in one batch behind a failing op of the chain fail
// with its error and write nothing, while the batch's other ops commit:
// a run's end, submitted right behind its output, never commits without it.
func TestChainStopsAfterAFailure(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, st)
		w := l.shardFor(sid)
		boom := errors.New("boom")
		queued := func(n int) {
			t.Helper()
			// Behind the op held below: queued, or taken by the loop.
			for deadline := time.Now().Add(10 * time.Second); w.pending.Load() < int64(n)+1; {
				if time.Now().After(deadline) {
					t.Fatalf("%d ops pending, want %d and the held one", w.pending.Load(), n)
				}
				time.Sleep(time.Millisecond)
			}
		}

		// Hold the writer so the ops below queue up and share one batch.
		release, holding := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			_, err := l.Do(ctx, sid, func(context.Context, store.Queries) ([]store.EventParams, error) {
				close(holding)
				<-release
				return nil, nil
			})
			held <- err
		}()
		<-holding

		chain := &Chain{}
		before, after, bystander := make(chan error, 1), make(chan error, 1), make(chan error, 1)
		to := func(ch chan error) func([]store.Event, error) { return func(_ []store.Event, err error) { ch <- err } }
		if err := l.AppendAsyncIn(ctx, chain, to(before), ev(sid, "before", 1)); err != nil {
			t.Fatal(err)
		}
		failing := make(chan error, 1)
		go func() {
			_, err := l.DoIn(ctx, chain, sid, func(context.Context, store.Queries) ([]store.EventParams, error) { return nil, boom })
			failing <- err
		}()
		queued(2)
		if err := l.AppendAsyncIn(ctx, chain, to(after), ev(sid, "after", 2)); err != nil {
			t.Fatal(err)
		}
		if err := l.AppendAsync(ctx, to(bystander), ev(sid, "bystander", 3)); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		ran := false
		go func() {
			_, err := l.DoIn(ctx, chain, sid, func(context.Context, store.Queries) ([]store.EventParams, error) {
				ran = true
				return []store.EventParams{ev(sid, "end", 4)}, nil
			})
			ended <- err
		}()
		queued(5)
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}

		if err := <-before; err != nil {
			t.Fatalf("the chain's op before the failure: %v", err)
		}
		for name, ch := range map[string]chan error{"failing": failing, "after": after, "end": ended} {
			if err := <-ch; !errors.Is(err, boom) {
				t.Fatalf("%s: %v, want boom", name, err)
			}
		}
		if ran {
			t.Fatal("the end's function ran after its chain failed")
		}
		if err := <-bystander; err != nil {
			t.Fatalf("an op outside the chain failed with it: %v", err)
		}
		if !errors.Is(chain.Err(), boom) {
			t.Fatalf("chain.Err() = %v, want boom", chain.Err())
		}
		evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
		}
		if len(types) != 2 || types[0] != "before" || types[1] != "bystander" {
			t.Fatalf("events %v, want [before bystander]", types)
		}
		// Later ops of the failed chain fail at once, alone too.
		if _, err := l.DoIn(ctx, chain, sid, func(context.Context, store.Queries) ([]store.EventParams, error) { return nil, nil }); !errors.Is(err, boom) {
			t.Fatalf("op after the failed batch: %v, want boom", err)
		}
	})
}
