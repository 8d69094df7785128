package eventlog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/testdb"
)

// twoProcesses is two processes' logs on one PostgreSQL database, with the
// given origins; the second hears the database's notifications.
func twoProcesses(t *testing.T, originA, originB string) (stA, stB store.Store, a, b *Log) {
	t.Helper()
	dsn := testdb.DSN(t, "postgres")
	open := func() store.Store {
		st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB = open(), open()
	a = New(stA, Options{Origin: originA})
	b = New(stB, Options{Origin: originB})
	stop := testdb.Listen(dsn, b.Notified)
	t.Cleanup(func() { stop(); b.Stop(); a.Stop() })
	return stA, stB, a, b
}

// Two processes configured with the same name (e.g. the same instance id)
// still hear each other's notifications: each log's origin is unique to it
// (issue 8, item 12).
func TestSameOriginPrefixStillHearsTheOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stA, stB, a, b := twoProcesses(t, "host/127.0.0.1:0", "host/127.0.0.1:0")
	if a.Origin() == b.Origin() || !strings.HasPrefix(a.Origin(), "host/127.0.0.1:0") || strings.ContainsAny(a.Origin(), " ,") {
		t.Fatalf("origins %q and %q", a.Origin(), b.Origin())
	}

	sid := session(t, stA)
	sub := b.Subscribe(sid, 0)
	defer sub.Close()
	if _, err := a.Append(ctx, ev(sid, "first", 1)); err != nil {
		t.Fatal(err)
	}
	collect(t, stB, sub, 1) // read from the store at subscribe
	// Now B's subscriber waits live: only A's notification can wake it.
	if _, err := a.Append(ctx, ev(sid, "second", 2)); err != nil {
		t.Fatal(err)
	}
	wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	evs, err := sub.Next(wait)
	if err != nil || len(evs) != 1 || evs[0].Type != "second" {
		t.Fatalf("B's subscriber after A's append: %v, %v (A's notification skipped as B's own?)", evs, err)
	}
}
