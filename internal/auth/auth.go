// Package auth resolves the bearer keys agentplane accepts into a Principal:
// the admin key, client (user) keys from AGENTPLANE_API_KEYS, and agent keys
// issued at registration (stored as SHA-256 hashes, cached briefly in memory
// so the LLM proxy's hot path does not hit the database per call).
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

// ErrUnauthorized is returned for a missing or unknown key.
var ErrUnauthorized = respond.E(http.StatusUnauthorized, "unauthorized", "missing or invalid API key")

// agentCacheTTL bounds how long a deleted or rotated agent key keeps working
// on another replica.
const agentCacheTTL = 5 * time.Second

// Keys checks keys.
type Keys struct {
	admin []byte
	users map[string]string // key -> user id
	st    store.Store

	mu     sync.Mutex
	agents map[string]cachedAgent // key hash -> agent id
}

type cachedAgent struct {
	agentID string
	expires time.Time
}

// New builds a key checker.
func New(adminKey string, userKeys map[string]string, st store.Store) *Keys {
	users := make(map[string]string, len(userKeys))
	for u, k := range userKeys {
		users[k] = u
	}
	return &Keys{admin: []byte(adminKey), users: users, st: st, agents: map[string]cachedAgent{}}
}

// HashKey is how agent keys are stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Bearer extracts the key from "Authorization: Bearer …" (or x-api-key).
func Bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.Header.Get("x-api-key")
}

// Resolve maps a key to its principal.
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
	c, ok := k.agents[h]
	k.mu.Unlock()
	if ok && now.Before(c.expires) {
		return Principal{Kind: Agent, AgentID: c.agentID}, nil
	}
	a, err := k.st.AgentGetByKeyHash(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, fmt.Errorf("resolve key: %w", err)
	}
	k.mu.Lock()
	if len(k.agents) > 10000 {
		k.agents = map[string]cachedAgent{}
	}
	k.agents[h] = cachedAgent{agentID: a.AgentID, expires: now.Add(agentCacheTTL)}
	k.mu.Unlock()
	return Principal{Kind: Agent, AgentID: a.AgentID}, nil
}

// Forget drops cached keys of an agent (after delete or key rotation here).
func (k *Keys) Forget(agentID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, c := range k.agents {
		if c.agentID == agentID {
			delete(k.agents, h)
		}
	}
}

// UserByKey checks a client key for WebSocket hello: the key must belong to
// userID.
func (k *Keys) UserByKey(userID, key string) bool {
	u, ok := k.users[key]
	return ok && subtle.ConstantTimeCompare([]byte(u), []byte(userID)) == 1
}

// Request resolves r's bearer key. A valid key also marks r's connection
// authenticated, so the connection limits no longer count it as a
// stranger's (connlimit).
func (k *Keys) Request(r *http.Request) (Principal, error) {
	p, err := k.Resolve(r.Context(), Bearer(r))
	if err == nil {
		connlimit.Authenticated(r.Context())
	}
	return p, err
}
