package eventlog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/testdb"
)

// Two processes configured with the same name (e.g. the same instance id)
// still hear each other's notifications: each log's origin is unique to it
// (issue 8, item 12).
func TestSameOriginPrefixStillHearsTheOther(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stA, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stA.Close()
	stB, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close()
	a := New(stA, Options{Origin: "host/127.0.0.1:0"})
	defer a.Stop()
	b := New(stB, Options{Origin: "host/127.0.0.1:0"})
	defer b.Stop()
	if a.Origin() == b.Origin() || !strings.HasPrefix(a.Origin(), "host/127.0.0.1:0") || strings.ContainsAny(a.Origin(), " ,") {
		t.Fatalf("origins %q and %q", a.Origin(), b.Origin())
	}

	defer testdb.Listen(dsn, b.Notified)()

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
