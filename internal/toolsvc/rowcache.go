package toolsvc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// toolRowTTL bounds how long a tool's row is used without reading it again.
// Changes do not wait for it: this process forgets a row when it writes it,
// and other processes when they hear of the write (store.NotifyToolsChanged,
// or a listener reconnect, which forgets everything). It only bounds a
// change missed while notifications were not arriving.
const toolRowTTL = 2 * time.Second

// toolRows keeps tool rows (and their absence) by name, so that a tool call
// does not read its tool's row every time: one statement — a round trip on
// PostgreSQL — fewer per call (issue 13).
type toolRows struct {
	mu  sync.Mutex
	m   map[string]cachedRow
	gen uint64           // moves on every forget: a read begun before it is not kept
	now func() time.Time // the clock (tests); nil: time.Now
}

type cachedRow struct {
	row *store.ToolRow // nil: no such tool
	at  time.Time
}

// get returns name's row, ErrNotFound-wrapped when there is none, from the
// cache while it is fresh, else from the store.
func (c *toolRows) get(ctx context.Context, st store.Store, name string) (*store.ToolRow, error) {
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	c.mu.Lock()
	e, ok := c.m[name]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Sub(e.at) < toolRowTTL {
		if e.row == nil {
			return nil, store.ErrNotFound
		}
		return e.row, nil
	}
	row, err := st.ToolGet(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	c.mu.Lock()
	if c.gen == gen { // nothing was forgotten while reading: row is current
		if c.m == nil {
			c.m = map[string]cachedRow{}
		}
		if len(c.m) >= toolRowsMax {
			clear(c.m)
		}
		c.m[name] = cachedRow{row: row, at: now}
	}
	c.mu.Unlock()
	return row, err
}

// toolRowsMax bounds the names kept (absent ones included: an agent
// calling made-up names must not grow the cache without end).
const toolRowsMax = 4096

// forget drops every cached row: a tool was written here or elsewhere.
func (c *toolRows) forget() {
	c.mu.Lock()
	c.gen++
	clear(c.m)
	c.mu.Unlock()
}

// writeTools runs fn, which writes tool rows, in one transaction that also
// tells the processes sharing the store (the word is sent when it commits,
// on PostgreSQL; SQLite has one process), then forgets this process's
// rows: after the commit, so a read from then on sees the write.
func (s *Service) writeTools(ctx context.Context, fn func(tx store.Queries) error) error {
	err := s.st.InTx(ctx, func(tx store.Queries) error {
		if err := fn(tx); err != nil {
			return err
		}
		return tx.EventsNotify(ctx, s.log.Origin(), []string{store.NotifyToolsChanged})
	})
	s.registry.rows.forget()
	return err
}

// heardToolsChanged is the remote half: another process wrote a tool, or
// notifications may have been missed (nil).
func (s *Service) heardToolsChanged(sessionIDs []string) {
	if sessionIDs == nil || slices.Contains(sessionIDs, store.NotifyToolsChanged) {
		s.registry.rows.forget()
	}
}
