package eventlog

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// Every session a transaction appended to is named in its notification,
// including one whose events went out before a later op's work (its
// appends are flushed first, so they were not among the last ones): a
// subscriber on another replica hears of them at once.
func TestNotificationNamesEarlierAppends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stA, stB, a, b := twoProcesses(t, "a", "b")

	x, y := session(t, stA), session(t, stA)
	sub := b.Subscribe(x, 0)
	defer sub.Close()
	if _, err := a.Append(ctx, ev(x, "first", 0)); err != nil {
		t.Fatal(err)
	}
	collect(t, stB, sub, 1) // read from the store at subscribe; live from now on

	release := holdWriter(t, a, session(t, stA))
	// One batch: x's append, then an op of y with work of its own, which
	// flushes x's append before it runs; the transaction's last appends
	// are y's alone.
	if err := a.AppendAsync(ctx, nil, ev(x, "x-event", 1)); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, a, 1)
	done := make(chan error, 1)
	go func() {
		_, err := a.Do(ctx, y, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
			if _, err := tx.SessionGet(ctx, y); err != nil {
				return nil, err
			}
			return []store.EventParams{ev(y, "y-event", 2)}, nil
		})
		done <- err
	}()
	waitQueued(t, a, 2)
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	evs, err := sub.Next(wait)
	if err != nil || len(evs) != 1 || evs[0].Type != "x-event" {
		t.Fatalf("B's subscriber of x after A's commit: %v, %v (x not named in the notification?)", evs, err)
	}
}
