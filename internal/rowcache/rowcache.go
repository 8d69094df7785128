// Package rowcache keeps rows read from the store for a moment, by key, so
// that a hot path does not read the same row on every request (a tool's
// definition on every tool call, an agent's row on every run): one
// statement fewer each time, a round trip on PostgreSQL.
//
// The owner of the rows forgets them on every write — its own, after the
// commit, and other processes', when their notification arrives — so a
// change applies at once; TTL only bounds a change missed while
// notifications were not arriving.
package rowcache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// Cache holds rows of type V by key, absent keys too (a read that returned
// store.ErrNotFound), so that callers asking for made-up keys are answered
// from memory as well. The zero value is not usable: set TTL.
type Cache[V any] struct {
	TTL time.Duration
	// Max bounds the keys kept; past it the cache starts over. 0: 4096.
	Max int
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time

	mu  sync.Mutex
	m   map[string]entry[V]
	gen uint64 // moves on every Forget: a read begun before it is not kept
}

type entry[V any] struct {
	row    V
	absent bool
	at     time.Time
}

// Get returns key's row from the cache while it is fresh, else from read,
// keeping what read returned unless a Forget happened meanwhile (the row
// read may predate the write that caused it). An absent row is returned
// as read returned it: an error wrapping store.ErrNotFound.
func (c *Cache[V]) Get(ctx context.Context, key string, read func(ctx context.Context, key string) (V, error)) (V, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[key]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.TTL {
		if e.absent {
			var zero V
			return zero, store.ErrNotFound
		}
		return e.row, nil
	}
	return c.read(ctx, key, gen, now, read)
}

// Refresh reads key's row from read whatever the cache holds, and keeps
// it as Get does: for a caller about to refuse something on the kept
// row's word (an absent row, say), which a write elsewhere not heard of
// yet may have changed.
func (c *Cache[V]) Refresh(ctx context.Context, key string, read func(ctx context.Context, key string) (V, error)) (V, error) {
	now := c.now()
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	return c.read(ctx, key, gen, now, read)
}

// read reads key's row and keeps it, unless a Forget happened since gen.
func (c *Cache[V]) read(ctx context.Context, key string, gen uint64, now time.Time, read func(ctx context.Context, key string) (V, error)) (V, error) {
	row, err := read(ctx, key)
	absent := errors.Is(err, store.ErrNotFound)
	if err != nil && !absent {
		return row, err
	}
	c.mu.Lock()
	if c.gen == gen {
		limit := c.Max
		if limit <= 0 {
			limit = 4096
		}
		if c.m == nil || len(c.m) >= limit {
			c.m = map[string]entry[V]{}
		}
		c.m[key] = entry[V]{row: row, absent: absent, at: now}
	}
	c.mu.Unlock()
	return row, err
}

// Forget drops every row kept: one was written, here or elsewhere, or
// word of writes may have been missed.
func (c *Cache[V]) Forget() {
	c.mu.Lock()
	c.gen++
	clear(c.m)
	c.mu.Unlock()
}

func (c *Cache[V]) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
