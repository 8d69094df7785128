package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/testdb"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestUnlimitedIsNil(t *testing.T) {
	l := New(Limit{}, Options{})
	if l != nil {
		t.Fatal("a zero limit made a limiter")
	}
	if ok, _ := l.Allow(context.Background(), "k"); !ok {
		t.Fatal("a nil limiter refused")
	}
}

// The local bucket: the burst at once, then the rate; Retry-After is the
// time until the next token; keys are independent.
func TestLocalBucket(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Limit{Rate: 2, Burst: 3}, Options{Now: c.now})
	ctx := context.Background()
	for i := range 3 {
		if ok, _ := l.Allow(ctx, "a"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := l.Allow(ctx, "a")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("over the burst: %v, retry after %s (want 500ms at 2/s)", ok, wait)
	}
	if ok, _ := l.Allow(ctx, "b"); !ok {
		t.Fatal("another key was refused")
	}
	c.add(250 * time.Millisecond)
	if ok, wait := l.Allow(ctx, "a"); ok || wait != 250*time.Millisecond {
		t.Fatalf("a quarter second later: %v %s", ok, wait)
	}
	c.add(250 * time.Millisecond)
	if ok, _ := l.Allow(ctx, "a"); !ok {
		t.Fatal("the refilled token was refused")
	}
}

// Two limiters on one database act as one bucket: across "replicas" the
// admitted requests never exceed burst + rate × elapsed, and a refused key
// is told how long to wait.
func TestSharedBucketHoldsAcrossProcesses(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		c := &clock{t: time.Unix(2000, 0)}
		lim := Limit{Rate: 20, Burst: 10}
		a := New(lim, Options{Shared: st, Now: c.now})
		b := New(lim, Options{Shared: st, Now: c.now})
		ctx := context.Background()
		admitted := 0
		var lastWait time.Duration
		for i := range 60 {
			l := a
			if i%2 == 1 {
				l = b
			}
			if ok, wait := l.Allow(ctx, "user:x"); ok {
				admitted++
			} else {
				lastWait = wait
			}
		}
		if admitted > 10 || admitted < 8 {
			// At most the burst; a little less when a process holds a
			// leased token the other could have used.
			t.Fatalf("admitted %d of 60 at one instant, burst 10", admitted)
		}
		if lastWait <= 0 || lastWait > time.Second {
			t.Fatalf("retry after %s", lastWait)
		}
		// A second later the bucket has refilled 20 tokens, capped at 10.
		c.add(time.Second)
		admitted = 0
		for i := range 60 {
			l := a
			if i%2 == 1 {
				l = b
			}
			if ok, _ := l.Allow(ctx, "user:x"); ok {
				admitted++
			}
		}
		if admitted > 10 || admitted < 8 {
			t.Fatalf("admitted %d after a refill to 10", admitted)
		}
	})
}

// The hot path: a key with tokens, in memory (SQLite) or leased from the
// shared bucket (PostgreSQL), the rate high enough never to refuse.
func BenchmarkAllow(b *testing.B) {
	for _, dialect := range testdb.Dialects {
		b.Run(dialect, func(b *testing.B) {
			opts := Options{}
			if dialect == "postgres" {
				opts.Shared = testdb.Open(b, dialect)
			}
			l := New(Limit{Rate: 1e9, Burst: 1e9}, opts)
			ctx := context.Background()
			l.Allow(ctx, "user:bench")
			b.ResetTimer()
			for range b.N {
				if ok, _ := l.Allow(ctx, "user:bench"); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
