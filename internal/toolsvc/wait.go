package toolsvc

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// DefaultWait and MaxWait bound POST /v1/tool_calls/{id}:wait (seed 001
// §2.1: a short long-poll the SDK repeats, so no proxy cuts it).
const (
	DefaultWait = 30 * time.Second
	MaxWait     = 120 * time.Second
)

// Caller is who reads a tool call: an agent sees its own calls, the admin
// every call.
type Caller struct {
	AgentID string
	Admin   bool
}

// Get returns the call as the API shows it.
func (s *Service) Get(ctx context.Context, who Caller, id string) (*CallView, error) {
	c, err := s.callFor(ctx, who, id)
	if err != nil {
		return nil, err
	}
	return View(c), nil
}

// Wait returns the call once it has reached a final state, or as it
// stands when timeout passes or ctx ends.
func (s *Service) Wait(ctx context.Context, who Caller, id string, timeout time.Duration) (*CallView, error) {
	c, err := s.callFor(ctx, who, id)
	if err != nil {
		return nil, err
	}
	return s.wait(ctx, c, timeout)
}

func (s *Service) callFor(ctx context.Context, who Caller, id string) (*store.ToolCall, error) {
	c, err := s.st.ToolCallGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !who.Admin && c.AgentID != who.AgentID) {
		return nil, ErrToolCallNotFound // another agent's call is indistinguishable from none
	}
	return c, err
}

// wait blocks until c is final. It registers before re-reading the call,
// so a change committed in between is never missed; after that each wake
// is one primary-key read, triggered by the tool_result event of the run.
func (s *Service) wait(ctx context.Context, c *store.ToolCall, timeout time.Duration) (*CallView, error) {
	if store.ToolCallTerminal(c.Status) || timeout <= 0 {
		return View(c), nil
	}
	w := s.waiters.add(c.ToolCallID, c.SessionID)
	defer s.waiters.remove(w)
	return s.waitOn(ctx, w, c, false, timeout)
}

// waitOn is wait's loop on a registered waiter w. fresh: c was read (or
// committed) after w was registered, so it need not be read again before
// the first wake. A call this process ended is handed over with the wake
// (waiters.settled), saving the read.
func (s *Service) waitOn(ctx context.Context, w *waiter, c *store.ToolCall, fresh bool, timeout time.Duration) (*CallView, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if ended := w.ended.Load(); ended != nil {
			return View(ended), nil
		}
		if !fresh {
			cur, err := s.st.ToolCallGet(ctx, c.ToolCallID)
			if err != nil {
				if ctx.Err() != nil {
					return View(c), nil
				}
				return nil, err
			}
			c = cur
		}
		fresh = false
		if store.ToolCallTerminal(c.Status) {
			return View(c), nil
		}
		select {
		case <-w.ch:
		case <-timer.C:
			return View(c), nil
		case <-ctx.Done():
			return View(c), nil
		}
	}
}

// waiters indexes the long-polls of this process by tool call (a local
// tool_result names its call, so ending one call wakes only its own waits)
// and by session (other processes report only sessions).
type waiters struct {
	mu        sync.Mutex
	byCall    map[string]map[*waiter]struct{}
	bySession map[string]map[*waiter]struct{}
	n         int
}

type waiter struct {
	callID, sessionID string
	ch                chan struct{}
	ended             atomic.Pointer[store.ToolCall] // the call in its final state, when this process ended it
}

func newWaiters() *waiters {
	return &waiters{byCall: map[string]map[*waiter]struct{}{}, bySession: map[string]map[*waiter]struct{}{}}
}

func (ws *waiters) add(callID, sessionID string) *waiter {
	w := &waiter{callID: callID, sessionID: sessionID, ch: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	addTo(ws.byCall, callID, w)
	addTo(ws.bySession, sessionID, w)
	ws.n++
	return w
}

func (ws *waiters) remove(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	removeFrom(ws.byCall, w.callID, w)
	removeFrom(ws.bySession, w.sessionID, w)
	ws.n--
}

func (ws *waiters) count() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.n
}

// ended: a tool_result of the call was committed (Service.committed), so
// its long-polls look again. It runs on the writer goroutine and never
// blocks.
func (ws *waiters) ended(callID string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.byCall[callID] {
		w.wake()
	}
}

// settled hands calls a committed step of this process ended to their
// long-polls, with the final row (no read needed).
func (ws *waiters) settled(calls []*store.ToolCall) {
	if len(calls) == 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, c := range calls {
		for w := range ws.byCall[c.ToolCallID] {
			w.ended.Store(c)
			w.wake()
		}
	}
}

// wakeSessions wakes the long-polls of sessions another process moved
// (nil: all of them).
func (ws *waiters) wakeSessions(ids []string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ids == nil {
		for _, set := range ws.bySession {
			for w := range set {
				w.wake()
			}
		}
		return
	}
	for _, id := range ids {
		for w := range ws.bySession[id] {
			w.wake()
		}
	}
}

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func addTo(m map[string]map[*waiter]struct{}, key string, w *waiter) {
	set := m[key]
	if set == nil {
		set = map[*waiter]struct{}{}
		m[key] = set
	}
	set[w] = struct{}{}
}

func removeFrom(m map[string]map[*waiter]struct{}, key string, w *waiter) {
	if set := m[key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(m, key)
		}
	}
}
