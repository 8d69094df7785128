package rowcache

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// table is a store stand-in: rows by key, counting reads.
type table struct {
	rows  map[string]int
	reads int
	// during, when set, runs inside a read, after the row was read.
	during func()
}

func (t *table) read(_ context.Context, key string) (int, error) {
	t.reads++
	v, ok := t.rows[key]
	if t.during != nil {
		t.during()
	}
	if !ok {
		return 0, fmt.Errorf("row %s: %w", key, store.ErrNotFound)
	}
	return v, nil
}

// A row is read once while fresh, an absent key too; Forget or the TTL
// makes the next Get read again, and a read that began before a Forget is
// not kept.
func TestCache(t *testing.T) {
	ctx := context.Background()
	tb := &table{rows: map[string]int{"a": 1}}
	clock := time.Unix(1000, 0)
	c := &Cache[int]{TTL: 2 * time.Second, Now: func() time.Time { return clock }}
	for range 3 {
		if v, err := c.Get(ctx, "a", tb.read); err != nil || v != 1 {
			t.Fatalf("get a: %v, %v", v, err)
		}
		if _, err := c.Get(ctx, "missing", tb.read); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
	}
	if tb.reads != 2 {
		t.Fatalf("%d reads for two keys asked three times each, want 2", tb.reads)
	}

	tb.rows["a"] = 2
	c.Forget()
	if v, _ := c.Get(ctx, "a", tb.read); v != 2 {
		t.Fatalf("after Forget: %d, want 2", v)
	}

	tb.rows["a"] = 3
	if v, _ := c.Get(ctx, "a", tb.read); v != 2 {
		t.Fatalf("within the TTL: %d, want the kept 2", v)
	}
	clock = clock.Add(2 * time.Second)
	if v, _ := c.Get(ctx, "a", tb.read); v != 3 {
		t.Fatalf("past the TTL: %d, want 3", v)
	}

	// The Forget lands while the row is being read: what was read may be
	// older than the write that caused it, so it is not kept.
	tb.rows["b"] = 1
	tb.during = c.Forget
	if _, err := c.Get(ctx, "b", tb.read); err != nil {
		t.Fatal(err)
	}
	tb.during = nil
	before := tb.reads
	if _, err := c.Get(ctx, "b", tb.read); err != nil {
		t.Fatal(err)
	}
	if tb.reads != before+1 {
		t.Fatal("a row read while a Forget happened was kept")
	}

	// Refresh reads whatever is kept, and keeps what it read.
	tb.rows["a"] = 4
	before = tb.reads
	if v, err := c.Refresh(ctx, "a", tb.read); err != nil || v != 4 {
		t.Fatalf("refresh: %v, %v", v, err)
	}
	if v, _ := c.Get(ctx, "a", tb.read); v != 4 || tb.reads != before+1 {
		t.Fatalf("after a refresh: %d in %d reads, want 4 in 1", v, tb.reads-before)
	}

	// A read that fails otherwise is neither kept nor turned into absence.
	failing := func(context.Context, string) (int, error) { return 0, errors.New("connection reset") }
	if _, err := c.Get(ctx, "c", failing); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("failed read: %v", err)
	}
	if v, err := c.Get(ctx, "c", func(context.Context, string) (int, error) { return 7, nil }); err != nil || v != 7 {
		t.Fatalf("after a failed read: %v, %v", v, err)
	}
}

// Max bounds the keys kept, absent ones included.
func TestCacheMax(t *testing.T) {
	ctx := context.Background()
	tb := &table{rows: map[string]int{}}
	c := &Cache[int]{TTL: time.Hour, Max: 8}
	for i := range 100 {
		c.Get(ctx, fmt.Sprint("k", i), tb.read)
		if n := len(c.m); n > 8 {
			t.Fatalf("%d keys kept, Max 8", n)
		}
	}
}
