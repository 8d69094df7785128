package eventlog

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// failingLists fails EventsList while fail is set.
type failingLists struct {
	store.Store
	fail atomic.Bool
}

func (f *failingLists) EventsList(ctx context.Context, p *store.EventsListParams) ([]store.Event, error) {
	if f.fail.Load() {
		return nil, errors.New("store unavailable")
	}
	return f.Store.EventsList(ctx, p)
}

// A subscription whose store read failed still reads the store on the next
// Next: the poke that told it of another process's events comes once, and
// a retry that waited for another would wait for ever.
func TestSubscriptionRereadsAfterAFailedRead(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		raw := testdb.Open(t, dialect)
		st := &failingLists{Store: raw}
		l := New(st, Options{})
		defer l.Stop()
		sid := session(t, raw)
		sub := l.Subscribe(sid, 0)
		defer sub.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if _, err := sub.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("an empty session's first Next: %v", err)
		}
		cancel()

		// Another process commits an event and says so while the store
		// cannot be read.
		st.fail.Store(true)
		if _, err := raw.EventsAppend(context.Background(), []store.EventParams{ev(sid, "elsewhere", 1)}); err != nil {
			t.Fatal(err)
		}
		l.Notified("another-process", []string{sid})
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := sub.Next(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next with the store failing: %v", err)
		}

		st.fail.Store(false)
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		evs, err := sub.Next(ctx)
		if err != nil || len(evs) != 1 || evs[0].Type != "elsewhere" {
			t.Fatalf("Next after the store came back: %v %v", evs, err)
		}
	})
}
