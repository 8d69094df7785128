// Package ratelimit enforces requests-per-second limits per key (a user key,
// an agent key) with token buckets (DESIGN §15): a bucket holds at most
// Burst tokens and refills at Rate per second; a request takes one token or
// is refused with the time until the next one.
//
// One process (SQLite) keeps the buckets in memory. Replicas sharing a
// PostgreSQL database must hold the limit together, so there the bucket
// lives in the database (store.RateTake) and each process leases tokens
// from it in small batches: a request that finds a leased token is admitted
// with a mutex and a map lookup, and only a process that ran out asks the
// database — ahead of time when it can (a background refill once half a
// batch is spent). Every admitted request spent a token of the shared
// bucket, so replicas together never exceed the limit; tokens a process
// leased and did not use within LeaseTTL are dropped, which can only admit
// fewer.
package ratelimit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// Limit is one token bucket's shape.
type Limit struct {
	Rate  float64 // tokens per second; 0 = unlimited
	Burst int     // bucket size, at least 1
}

// Taker takes tokens from a shared bucket: the store (store.Queries.RateTake).
type Taker interface {
	RateTake(ctx context.Context, p *store.RateTakeParams) (*store.RateTaken, error)
	RateBucketsPrune(ctx context.Context, before int64) (int, error)
}

// Options configure a Limiter.
type Options struct {
	// Shared, when set, keeps the buckets in the database for replicas to
	// share; nil keeps them in this process.
	Shared Taker
	// LeaseTTL drops leased tokens not used within it (default 1 s).
	LeaseTTL time.Duration
	Logger   *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Limiter admits requests per key under one Limit.
type Limiter struct {
	lim  Limit
	opts Options
	// batch is how many tokens a process leases at once: a tenth of a
	// second's worth, at least 1, at most the burst.
	batch float64

	mu   sync.Mutex
	keys map[string]*bucket

	lastPrune time.Time
}

type bucket struct {
	tokens float64   // local: the bucket; shared: tokens leased, unspent
	last   time.Time // local: last refill; shared: when the lease was taken
	// shared only
	deniedUntil time.Time     // the shared bucket is empty until then
	fetching    chan struct{} // a take from the store is under way
}

// New makes a limiter; nil when lim is unlimited (Allow on nil admits).
func New(lim Limit, opts Options) *Limiter {
	if lim.Rate <= 0 {
		return nil
	}
	if lim.Burst < 1 {
		lim.Burst = 1
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	batch := math.Min(float64(lim.Burst), math.Max(1, math.Ceil(lim.Rate/10)))
	return &Limiter{lim: lim, opts: opts, batch: batch, keys: map[string]*bucket{}}
}

// maxKeys bounds the map; idle keys are forgotten before it is reached.
const maxKeys = 100_000

// Allow takes a token of key's bucket. When there is none it returns false
// and how long until one is due (Retry-After).
func (l *Limiter) Allow(ctx context.Context, key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	if l.opts.Shared == nil {
		return l.allowLocal(key)
	}
	return l.allowShared(ctx, key)
}

func (l *Limiter) allowLocal(key string) (bool, time.Duration) {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		l.forgetIdle(now)
		b = &bucket{tokens: float64(l.lim.Burst), last: now}
		l.keys[key] = b
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = math.Min(float64(l.lim.Burst), b.tokens+dt*l.lim.Rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false, l.wait(b.tokens)
	}
	b.tokens--
	return true, 0
}

// wait is the time until a bucket holding tokens has one.
func (l *Limiter) wait(tokens float64) time.Duration {
	return time.Duration((1 - tokens) / l.lim.Rate * float64(time.Second))
}

// forgetIdle drops buckets that are full again (local) or hold nothing
// worth keeping (shared), when the map has grown large. Called with l.mu.
func (l *Limiter) forgetIdle(now time.Time) {
	if len(l.keys) < maxKeys {
		return
	}
	for k, b := range l.keys {
		full := float64(l.lim.Burst)/l.lim.Rate < now.Sub(b.last).Seconds()
		if b.fetching == nil && (full || now.After(b.deniedUntil) && now.Sub(b.last) > l.opts.LeaseTTL) {
			delete(l.keys, k)
		}
	}
	if len(l.keys) >= maxKeys {
		clear(l.keys) // everything is busy: start over rather than grow
	}
}

func (l *Limiter) allowShared(ctx context.Context, key string) (bool, time.Duration) {
	for attempt := 0; ; attempt++ {
		now := l.opts.Now()
		l.mu.Lock()
		b := l.keys[key]
		if b == nil {
			l.forgetIdle(now)
			b = &bucket{}
			l.keys[key] = b
		}
		if now.Before(b.deniedUntil) {
			l.mu.Unlock()
			return false, b.deniedUntil.Sub(now)
		}
		if now.Sub(b.last) > l.opts.LeaseTTL {
			b.tokens = 0 // a stale lease: those tokens are not ours to spend any more
		}
		if b.tokens >= 1 {
			b.tokens--
			if b.tokens < l.batch/2 && b.fetching == nil {
				// Refill in the background so the next requests find tokens.
				l.startFetch(key, b)
			}
			l.mu.Unlock()
			return true, 0
		}
		if attempt >= 3 && b.fetching == nil {
			// Takes keep bringing tokens that other requests of this
			// process spend first: the key is at its limit.
			l.mu.Unlock()
			return false, l.wait(0)
		}
		ch := b.fetching
		if ch == nil {
			ch = l.startFetch(key, b)
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, l.wait(0)
		}
	}
}

// takeTimeout bounds one take from the store.
const takeTimeout = 2 * time.Second

// startFetch takes a batch from the shared bucket on a goroutine; the
// returned channel closes when the tokens are in b. Called with l.mu.
func (l *Limiter) startFetch(key string, b *bucket) chan struct{} {
	ch := make(chan struct{})
	b.fetching = ch
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), takeTimeout)
		defer cancel()
		now := l.opts.Now()
		got, err := l.opts.Shared.RateTake(ctx, &store.RateTakeParams{Key: key, Rate: l.lim.Rate, Burst: float64(l.lim.Burst), Want: l.batch, At: now.UnixMilli()})
		l.mu.Lock()
		defer l.mu.Unlock()
		b.fetching = nil
		close(ch)
		switch {
		case err != nil:
			// The database cannot say: admit rather than refuse everyone
			// (a request that needs the database will find out itself).
			l.opts.Logger.Warn("rate limit: shared bucket unavailable; admitting", "key", key, "err", err)
			b.tokens, b.last = l.batch, now
		case got.Granted > 0:
			if now.Sub(b.last) > l.opts.LeaseTTL {
				b.tokens = 0
			}
			b.tokens += got.Granted
			b.last = now
		default:
			b.deniedUntil = now.Add(l.wait(got.Tokens))
		}
		l.maybePrune(now)
	}()
	return ch
}

// pruneEvery paces deleting idle shared buckets (an idle bucket is full,
// the same as none).
const pruneEvery = time.Minute

// maybePrune deletes shared buckets idle long enough to be full again.
// Called with l.mu.
func (l *Limiter) maybePrune(now time.Time) {
	if now.Sub(l.lastPrune) < pruneEvery {
		return
	}
	l.lastPrune = now
	idle := time.Duration(float64(l.lim.Burst)/l.lim.Rate*float64(time.Second)) + time.Minute
	before := now.Add(-idle).UnixMilli()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := l.opts.Shared.RateBucketsPrune(ctx, before); err != nil {
			l.opts.Logger.Warn("rate limit: prune idle buckets", "err", err)
		}
	}()
}
