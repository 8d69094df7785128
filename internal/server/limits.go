package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/ratelimit"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// rateLimits builds the per-key request limits of the config file's
// limits: section (DESIGN §15) as the key checker's hook: every HTTP
// request with a user or agent key, and every WebSocket command of a
// user's connection, takes a token of its key's bucket. Replicas sharing a
// PostgreSQL database share the buckets; one SQLite process keeps them in
// memory. Nil when no rate is configured.
func rateLimits(l config.Limits, st store.Store, logger *slog.Logger) func(ctx context.Context, p auth.Principal) error {
	opts := ratelimit.Options{Logger: logger}
	if st.Dialect() == "postgres" {
		opts.Shared = st
	}
	users := ratelimit.New(ratelimit.Limit{Rate: l.UserRequestsPerSecond, Burst: l.UserBurst}, opts)
	agents := ratelimit.New(ratelimit.Limit{Rate: l.AgentRequestsPerSecond, Burst: l.AgentBurst}, opts)
	if users == nil && agents == nil {
		return nil
	}
	return func(ctx context.Context, p auth.Principal) error {
		var ok bool
		var wait time.Duration
		var what string
		switch p.Kind {
		case auth.User:
			ok, wait = users.Allow(ctx, "user:"+p.UserID)
			what = fmt.Sprintf("user %s is over its rate limit (%g requests/s)", p.UserID, l.UserRequestsPerSecond)
		case auth.Agent:
			ok, wait = agents.Allow(ctx, "agent:"+p.AgentID)
			what = fmt.Sprintf("agent %s is over its rate limit (%g requests/s)", p.AgentID, l.AgentRequestsPerSecond)
		default:
			return nil
		}
		if ok {
			return nil
		}
		return RateLimited(what, wait)
	}
}

// RateLimited is the 429 rate_limited answer: retry_after in whole seconds
// (at least 1: the Retry-After header has no finer unit) and retry_after_ms.
func RateLimited(message string, wait time.Duration) error {
	ms := max(wait.Milliseconds(), 1)
	e := respond.E(http.StatusTooManyRequests, "rate_limited", message+"; retry later")
	e.Details = map[string]any{"retry_after": (ms + 999) / 1000, "retry_after_ms": ms}
	return e
}

// userConnections counts WebSocket connections per user in the shared
// database, so AGENTPLANE_MAX_WS_PER_USER holds across replicas
// (ingress.Options.UserConnections). A crashed process's connections stop
// counting when its heartbeat goes stale (staleAfter); a process forgets
// its own at start and stop.
type userConnections struct {
	st         store.Store
	instanceID string
	max        int
	log        *slog.Logger
	stopped    atomic.Bool // the process forgets all its rows at once now
}

func (u *userConnections) Admit(ctx context.Context, userID string) (bool, error) {
	now := time.Now()
	ok, _, err := u.st.UserConnectionAdmit(ctx, &store.UserConnectionAdmitParams{UserID: userID, InstanceID: u.instanceID, Max: u.max,
		AliveSince: now.Add(-staleAfter).UnixMilli(), At: now.UnixMilli()})
	return ok, err
}

// Leave uncounts a connection in the background, retrying a while: a lost
// decrement would hold a place until this process stops.
func (u *userConnections) Leave(userID string) {
	go func() {
		backoff := 100 * time.Millisecond
		for attempt := 0; !u.stopped.Load(); attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := u.st.UserConnectionLeave(ctx, userID, u.instanceID)
			cancel()
			if err == nil {
				return
			}
			if attempt == 8 {
				u.log.Error("uncount a WebSocket connection failed; it counts against the user until this process restarts", "user_id", userID, "err", err)
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
}
