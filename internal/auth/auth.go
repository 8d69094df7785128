// Package auth resolves the bearer keys agentplane accepts into a Principal:
// the admin key, client (user) keys from AGENTPLANE_API_KEYS or created over
// the API, and agent keys issued at registration (stored as SHA-256 hashes,
// cached briefly in memory so the LLM proxy's hot path does not hit the
// database per call).
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/connlimit"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// Kinds of principal.
const (
	Admin = "admin"
	Agent = "agent"
	User  = "user"
)

// Principal is who a request comes from.
type Principal struct {
	Kind    string
	AgentID string // Kind == Agent
	UserID  string // Kind == User
}

// Actor names p in the audit log: "admin", "user:<id>" or "agent:<id>".
func (p Principal) Actor() string {
	switch p.Kind {
	case User:
		return "user:" + p.UserID
	case Agent:
		return "agent:" + p.AgentID
	}
	return p.Kind
}

// ErrUnauthorized is returned for a missing or unknown key.
var ErrUnauthorized = respond.E(http.StatusUnauthorized, "unauthorized", "missing or invalid API key")

// keyCacheTTL bounds how long a deleted or rotated key (an agent's, or a
// user key managed over the API) keeps working on another replica: each
// process reads a key from the store at most once per TTL.
const keyCacheTTL = 5 * time.Second

// missCacheTTL remembers a key that matched nothing, so a client retrying
// a bad key does not cost three lookups per request. Keys are random, so a
// key created after a miss was never presented before it.
const missCacheTTL = time.Second

// keyCacheMax bounds the cache; it is simply reset when full.
const keyCacheMax = 10000

// Keys checks keys.
type Keys struct {
	admin []byte
	users map[string]string // key -> user id (AGENTPLANE_API_KEYS)
	st    store.Store

	mu    sync.Mutex
	cache map[string]cachedKey // key hash -> principal, for keys found in the store

	// limit, when set, admits one request of a principal (rate limits,
	// DESIGN §15) or returns the refusal to answer.
	limit func(ctx context.Context, p Principal) error
}

type cachedKey struct {
	p       Principal // Kind "" for a miss
	expires time.Time
}

// New builds a key checker.
func New(adminKey string, userKeys map[string]string, st store.Store) *Keys {
	users := make(map[string]string, len(userKeys))
	for u, k := range userKeys {
		users[k] = u
	}
	return &Keys{admin: []byte(adminKey), users: users, st: st, cache: map[string]cachedKey{}}
}

// HashKey is how agent keys and user keys are stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Bearer extracts the key from "Authorization: Bearer …", else from
// x-api-key or x-admin-key (seed 001 names the admin key's header so).
// The key decides the principal, whichever header carried it.
func Bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	return r.Header.Get("x-admin-key")
}

// Resolve maps a key to its principal: the admin key, a user key from
// AGENTPLANE_API_KEYS, or (from the store, cached for keyCacheTTL) an
// agent key, a user key created over the API, or an agent key replaced
// by rotate_key still in its grace period.
func (k *Keys) Resolve(ctx context.Context, key string) (Principal, error) {
	if key == "" {
		return Principal{}, ErrUnauthorized
	}
	if subtle.ConstantTimeCompare([]byte(key), k.admin) == 1 {
		return Principal{Kind: Admin}, nil
	}
	if u, ok := k.users[key]; ok {
		return Principal{Kind: User, UserID: u}, nil
	}
	h := HashKey(key)
	now := time.Now()
	k.mu.Lock()
	c, ok := k.cache[h]
	k.mu.Unlock()
	if ok && now.Before(c.expires) {
		if c.p.Kind == "" {
			return Principal{}, ErrUnauthorized
		}
		return c.p, nil
	}
	p, until, err := k.lookup(ctx, h, now)
	if err != nil {
		return Principal{}, fmt.Errorf("resolve key: %w", err)
	}
	expires := now.Add(keyCacheTTL)
	if p.Kind == "" {
		expires = now.Add(missCacheTTL)
	}
	if !until.IsZero() && until.Before(expires) {
		expires = until
	}
	k.mu.Lock()
	if len(k.cache) >= keyCacheMax {
		k.cache = map[string]cachedKey{}
	}
	k.cache[h] = cachedKey{p: p, expires: expires}
	k.mu.Unlock()
	if p.Kind == "" {
		return Principal{}, ErrUnauthorized
	}
	return p, nil
}

// lookup finds the key hash h in the store: Kind "" when nothing has it.
// until, when set, is when the key stops being valid (a grace period).
func (k *Keys) lookup(ctx context.Context, h string, now time.Time) (p Principal, until time.Time, err error) {
	a, err := k.st.AgentGetByKeyHash(ctx, h)
	if err == nil {
		return Principal{Kind: Agent, AgentID: a.AgentID}, time.Time{}, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return p, until, err
	}
	u, err := k.st.UserKeyGetByHash(ctx, h)
	if err == nil {
		return Principal{Kind: User, UserID: u.UserID}, time.Time{}, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return p, until, err
	}
	agentID, expires, err := k.st.AgentKeyGraceGet(ctx, h, now.UnixMilli())
	if err == nil {
		return Principal{Kind: Agent, AgentID: agentID}, time.UnixMilli(expires), nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return p, until, err
	}
	return Principal{}, time.Time{}, nil
}

// Forget drops cached keys of an agent (after delete or key rotation here).
func (k *Keys) Forget(agentID string) {
	k.forget(func(p Principal) bool { return p.Kind == Agent && p.AgentID == agentID })
}

// ForgetUser drops cached keys of a user (after a key was deleted here).
func (k *Keys) ForgetUser(userID string) {
	k.forget(func(p Principal) bool { return p.Kind == User && p.UserID == userID })
}

func (k *Keys) forget(match func(Principal) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, c := range k.cache {
		if match(c.p) {
			delete(k.cache, h)
		}
	}
}

// UserByKey checks a client key for WebSocket hello: the key must be a user
// key (from AGENTPLANE_API_KEYS or created over the API) of userID. An
// error is the store's, not a verdict.
func (k *Keys) UserByKey(ctx context.Context, userID, key string) (bool, error) {
	if u, ok := k.users[key]; ok {
		return subtle.ConstantTimeCompare([]byte(u), []byte(userID)) == 1, nil
	}
	p, err := k.Resolve(ctx, key)
	if errors.Is(err, ErrUnauthorized) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return p.Kind == User && subtle.ConstantTimeCompare([]byte(p.UserID), []byte(userID)) == 1, nil
}

// SetLimit installs the per-principal rate limit Request and Limit apply
// (before requests are served).
func (k *Keys) SetLimit(fn func(ctx context.Context, p Principal) error) { k.limit = fn }

// Limit admits one request or WebSocket command of p under its rate limit,
// or returns the 429 rate_limited to answer. The admin key is not limited.
func (k *Keys) Limit(ctx context.Context, p Principal) error {
	if k.limit == nil || p.Kind == Admin {
		return nil
	}
	return k.limit(ctx, p)
}

// Request resolves r's bearer key and takes a token of its rate limit. A
// valid key also marks r's connection authenticated, so the connection
// limits no longer count it as a stranger's (connlimit).
func (k *Keys) Request(r *http.Request) (Principal, error) {
	p, err := k.Resolve(r.Context(), Bearer(r))
	if err != nil {
		return p, err
	}
	connlimit.Authenticated(r.Context())
	return p, k.Limit(r.Context(), p)
}
