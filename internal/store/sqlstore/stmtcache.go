package sqlstore

import (
	"context"
	"database/sql"
	"strings"
	"sync"
)

// maxCachedStmts bounds a pool's prepared statements. Queries are constants
// or built from a few optional clauses and IN lists, so the set is small;
// past the bound new texts simply run unprepared.
const maxCachedStmts = 512

// stmtCache holds prepared statements of one pool, by query text. On SQLite
// (modernc) every unprepared statement is parsed and planned again on each
// call — 17 % of the server's CPU per tool call (issue 13); database/sql
// prepares a *sql.Stmt lazily once per connection and reuses it. PostgreSQL
// does not need it: pgx caches prepared statements per connection itself.
type stmtCache struct {
	db      *sql.DB
	mu      sync.RWMutex
	m       map[string]*sql.Stmt // nil value: preparing failed, run unprepared
	pending map[string]bool      // being prepared in the background
	closed  bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}, pending: map[string]bool{}}
}

// get returns query prepared on the pool, or nil when it runs unprepared
// (a multi-statement text, a full cache, or a text the driver will not
// prepare: its error then comes from running it). Transactions do not
// come here: their Pipe prepares on its connection.
func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	c.mu.RLock()
	s, ok := c.m[query]
	c.mu.RUnlock()
	if ok {
		return s
	}
	if !SingleStatement(query) {
		return nil
	}
	// Never prepare while holding mu: preparing waits for a connection,
	// which a transaction may hold while it wants mu.
	c.mu.Lock()
	if s, ok := c.m[query]; ok {
		c.mu.Unlock()
		return s
	}
	if c.closed || c.pending[query] || len(c.m)+len(c.pending) >= maxCachedStmts {
		c.mu.Unlock()
		return nil
	}
	c.pending[query] = true
	c.mu.Unlock()
	return c.prepare(query)
}

// SingleStatement: query is one statement (a trailing ";" allowed), which a
// driver can prepare; several run unprepared.
func SingleStatement(query string) bool {
	return !strings.Contains(strings.TrimRight(strings.TrimSpace(query), ";"), ";")
}

// prepareOne prepares query, with a context that does not end (the
// statement outlives its first caller). Nil when the driver refuses it.
func (c *stmtCache) prepareOne(ctx context.Context, query string) *sql.Stmt {
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	return s
}

// prepare prepares query (pending) and caches it.
func (c *stmtCache) prepare(query string) *sql.Stmt {
	s := c.prepareOne(context.Background(), query)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, query)
	if c.closed {
		if s != nil {
			s.Close()
		}
		return nil
	}
	c.m[query] = s
	return s
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		if s != nil {
			s.Close()
		}
	}
	c.m = map[string]*sql.Stmt{}
	c.closed = true
}
