package llmproxy

import (
	"net/http"
	"sync"
	"time"
)

// limiter enforces the per-agent request and token rates with two token
// buckets per agent. A request takes one request token; a call's usage is
// charged to the token bucket when it ends, which may drive it negative:
// the agent is then refused until the bucket refills above zero.
type limiter struct {
	rps   float64
	burst float64
	tpm   float64

	mu     sync.Mutex
	agents map[string]*bucket
}

type bucket struct {
	reqs, toks float64
	last       time.Time
}

func newLimiter(l Limits) *limiter {
	if l.RequestsPerSecond <= 0 && l.TokensPerMinute <= 0 {
		return nil
	}
	return &limiter{rps: l.RequestsPerSecond, burst: float64(l.Burst), tpm: float64(l.TokensPerMinute), agents: map[string]*bucket{}}
}

// refill brings b up to now. Called with l.mu held.
func (l *limiter) refill(b *bucket, now time.Time) {
	dt := now.Sub(b.last).Seconds()
	if dt <= 0 {
		return
	}
	b.last = now
	if l.rps > 0 {
		b.reqs = min(l.burst, b.reqs+dt*l.rps)
	}
	if l.tpm > 0 {
		b.toks = min(l.tpm, b.toks+dt*l.tpm/60)
	}
}

func (l *limiter) get(agent string, now time.Time) *bucket {
	b := l.agents[agent]
	if b == nil {
		b = &bucket{reqs: l.burst, toks: l.tpm, last: now}
		l.agents[agent] = b
	}
	l.refill(b, now)
	return b
}

// admit takes one request token for agent, or returns the 429 to answer.
func (l *limiter) admit(agent string, now time.Time) *Error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(agent, now)
	if l.tpm > 0 && b.toks <= 0 {
		wait := (1 - b.toks) / (l.tpm / 60) // seconds until the budget is positive again
		return rateLimited("token rate limit exceeded", wait)
	}
	if l.rps > 0 {
		if b.reqs < 1 {
			return rateLimited("request rate limit exceeded", (1-b.reqs)/l.rps)
		}
		b.reqs--
	}
	return nil
}

// charge takes a finished call's tokens from agent's budget.
func (l *limiter) charge(agent string, tokens int64, now time.Time) {
	if l == nil || l.tpm <= 0 || tokens <= 0 {
		return
	}
	l.mu.Lock()
	l.get(agent, now).toks -= float64(tokens)
	l.mu.Unlock()
}

// sweep forgets agents whose buckets are full again (idle agents), so the map
// does not grow with every agent ever seen.
func (l *limiter) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.agents {
		l.refill(b, now)
		if (l.rps <= 0 || b.reqs >= l.burst) && (l.tpm <= 0 || b.toks >= l.tpm) {
			delete(l.agents, k)
		}
	}
}

func rateLimited(msg string, waitSeconds float64) *Error {
	ms := int64(waitSeconds*1000) + 1
	return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, Message: msg, RetryAfterMS: ms}
}
