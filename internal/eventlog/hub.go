package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentplane/agentplane/internal/store"
)

// liveBufferLimit bounds the events a subscription holds for a slow reader;
// beyond it the subscription drops them and re-reads from the store, so a
// slow client costs store reads, not unbounded memory.
const liveBufferLimit = 4096

// catchUpPage is how many events one store read fetches.
const catchUpPage = 500

// ErrSubscriptionClosed ends Next after Close or log shutdown.
var ErrSubscriptionClosed = errors.New("subscription closed")

// Hub fans committed events out to the subscriptions of their session.
type Hub struct {
	mu   sync.RWMutex
	subs map[string]map[*Subscription]struct{}
}

// NewHub makes an empty hub.
func NewHub() *Hub { return &Hub{subs: map[string]map[*Subscription]struct{}{}} }

// Publish hands committed events to subscribers. It never blocks.
func (h *Hub) Publish(events []store.Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i := range events {
		for s := range h.subs[events[i].SessionID] {
			s.push(events[i])
		}
	}
}

// Poke tells a session's subscribers that events were committed elsewhere
// (another process): they re-read the store from their cursor.
func (h *Hub) Poke(sessionID string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for s := range h.subs[sessionID] {
		s.mu.Lock()
		s.stale = true
		s.mu.Unlock()
		s.wake()
	}
}

// PokeAll marks every subscription stale (notifications may have been lost).
func (h *Hub) PokeAll() {
	h.mu.RLock()
	var ids []string
	for id := range h.subs {
		ids = append(ids, id)
	}
	h.mu.RUnlock()
	for _, id := range ids {
		h.Poke(id)
	}
}

// subscribe registers a subscription after afterSeq; stale when the store
// may already hold events past it (a live subscription is made before
// the events it follows are committed: Log.SubscribeLive).
func (h *Hub) subscribe(st store.Store, sessionID string, afterSeq int64, stale bool) *Subscription {
	s := &Subscription{hub: h, st: st, sessionID: sessionID, cursor: afterSeq, stale: stale, notify: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.subs[sessionID] == nil {
		h.subs[sessionID] = map[*Subscription]struct{}{}
	}
	h.subs[sessionID][s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[s.sessionID]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(h.subs, s.sessionID)
		}
	}
}

func (h *Hub) closeAll() {
	h.mu.Lock()
	var all []*Subscription
	for _, m := range h.subs {
		for s := range m {
			all = append(all, s)
		}
	}
	h.subs = map[string]map[*Subscription]struct{}{}
	h.mu.Unlock()
	for _, s := range all {
		s.markClosed()
	}
}

// Subscription delivers one session's events after a cursor. It registers
// for live events before reading the store, and reads the store whenever
// the live stream shows a gap, so nothing committed is ever skipped and
// nothing is delivered twice.
type Subscription struct {
	hub       *Hub
	st        store.Store
	sessionID string
	notify    chan struct{}

	mu     sync.Mutex
	buf    []store.Event
	stale  bool // the store may hold events past cursor not in buf
	closed bool

	cursor int64 // last seq delivered; owned by the reader
}

// StartAfter sets the cursor of a subscription made by Log.SubscribeLive:
// Next delivers from seq+1. Called by the reader, before its first Next.
func (s *Subscription) StartAfter(seq int64) { s.cursor = seq }

// SessionID is the followed session.
func (s *Subscription) SessionID() string { return s.sessionID }

// Cursor is the last seq Next returned. It moves when Next returns, before
// the caller has done anything with the events, and only the goroutine
// calling Next may read it.
func (s *Subscription) Cursor() int64 { return s.cursor }

func (s *Subscription) push(e store.Event) {
	s.mu.Lock()
	if len(s.buf) >= liveBufferLimit {
		s.buf = nil
		s.stale = true
	} else {
		s.buf = append(s.buf, e)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Subscription) markClosed() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wake()
}

// Close stops the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.hub.remove(s)
	s.markClosed()
}

// Next blocks until there are events after the cursor and returns them in
// seq order (consecutive, starting at cursor+1).
func (s *Subscription) Next(ctx context.Context) ([]store.Event, error) {
	for {
		s.mu.Lock()
		buf, stale, closed := s.buf, s.stale, s.closed
		s.buf, s.stale = nil, false
		s.mu.Unlock()
		if closed {
			return nil, ErrSubscriptionClosed
		}
		// Drop what was already delivered (the store read may have covered it).
		i := 0
		for i < len(buf) && buf[i].Seq <= s.cursor {
			i++
		}
		buf = buf[i:]
		if !stale && len(buf) > 0 && buf[0].Seq == s.cursor+1 && contiguous(buf) {
			s.cursor = buf[len(buf)-1].Seq
			return buf, nil
		}
		if stale || len(buf) > 0 {
			evs, err := s.st.EventsList(ctx, &store.EventsListParams{SessionID: s.sessionID, AfterSeq: s.cursor, Limit: catchUpPage})
			if err != nil {
				// Put back what we took so a retry loses nothing — the
				// reason to read the store too (a poke for another
				// process's events comes once).
				s.requeue(buf)
				if stale {
					s.mu.Lock()
					s.stale = true
					s.mu.Unlock()
				}
				return nil, fmt.Errorf("subscription catch-up: %w", err)
			}
			if len(evs) == catchUpPage || (len(buf) > 0 && len(evs) > 0 && evs[len(evs)-1].Seq < buf[0].Seq-1) {
				// More remain in the store than one page; come back for them.
				s.mu.Lock()
				s.stale = true
				s.mu.Unlock()
			}
			s.requeue(buf)
			if len(evs) > 0 {
				s.cursor = evs[len(evs)-1].Seq
				return evs, nil
			}
			if len(buf) > 0 {
				// A gap the store does not fill yet cannot happen for a
				// committed stream; re-check on the next wake rather than spin.
				s.mu.Lock()
				s.stale = false
				s.mu.Unlock()
			}
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Subscription) requeue(buf []store.Event) {
	if len(buf) == 0 {
		return
	}
	s.mu.Lock()
	s.buf = append(buf, s.buf...)
	s.mu.Unlock()
}

func contiguous(evs []store.Event) bool {
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			return false
		}
	}
	return true
}
