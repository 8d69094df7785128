package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// Redaction (DESIGN §15): a tool that names argument paths to redact has
// "[redacted]" stored at those paths — in the call's row, its events, its
// approval's summary — and the real arguments are kept only in the memory
// of the process that created the call (the holder), just long enough to
// POST them to the tool. So a secret is never written anywhere, and the
// price is durability: a call whose holder is gone by the time it is
// dispatched cannot be sent, and ends FAILED with args_unavailable (it was
// never sent, so there is no doubt about its outcome). A call approved
// through another replica is claimed by its holder, which hears of the
// dispatch through the event notifications (and a periodic check).

// heldArgs are the real arguments of this process's redacted calls, by
// tool call id, until the call ends.
type heldArgs struct {
	mu sync.Mutex
	m  map[string]*held
}

type held struct {
	sessionID string
	args      json.RawMessage
	since     time.Time
	// committed: the call's row exists. Until then claimHeld leaves the
	// entry alone — a lookup would not find the row and forget the args.
	committed bool
}

func (h *heldArgs) put(id, sessionID string, args json.RawMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*held{}
	}
	h.m[id] = &held{sessionID: sessionID, args: args, since: time.Now()}
}

// commit marks id's call as stored.
func (h *heldArgs) commit(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.m[id]; x != nil {
		x.committed = true
	}
}

func (h *heldArgs) get(id string) json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.m[id]; x != nil {
		return x.args
	}
	return nil
}

func (h *heldArgs) drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// ids lists held calls, of the given sessions only when sessions is not nil.
func (h *heldArgs) ids(sessions map[string]bool) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id, x := range h.m {
		if x.committed && (sessions == nil || sessions[x.sessionID]) {
			out = append(out, id)
		}
	}
	return out
}

// HeldArgs is how many redacted calls' real arguments this process holds.
func (s *Service) HeldArgs() int {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return len(s.held.m)
}

// argsFor returns the arguments to send c's tool: the stored ones, or for a
// redacted call the real ones this process holds (nil when it holds none).
func (s *Service) argsFor(c *store.ToolCall, rec policyRecord) json.RawMessage {
	if !rec.ArgsRedacted {
		return c.Args
	}
	return s.held.get(c.ToolCallID)
}

// holderAlive reports whether the process holding a redacted call's real
// arguments is still the one running under its instance id, with a fresh
// heartbeat.
func (s *Service) holderAlive(ctx context.Context, rec policyRecord) bool {
	if rec.ArgsHeldBy == "" || rec.ArgsHolder == s.log.Origin() {
		return false
	}
	in, err := s.st.InstanceGet(ctx, rec.ArgsHeldBy)
	if err != nil {
		return !errors.Is(err, store.ErrNotFound) // unknown: leave it to the holder or the deadline
	}
	return in.Process == rec.ArgsHolder && in.HeartbeatAt >= s.now()-s.opts.StaleAfter.Milliseconds()
}

// claimHeld starts the held calls (of sessionIDs; nil: all) that another
// process dispatched — approved through it — and forgets those that ended.
func (s *Service) claimHeld(ctx context.Context, sessionIDs []string) {
	var sessions map[string]bool
	if sessionIDs != nil {
		sessions = make(map[string]bool, len(sessionIDs))
		for _, id := range sessionIDs {
			sessions[id] = true
		}
	}
	for _, id := range s.held.ids(sessions) {
		c, err := s.st.ToolCallGet(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			s.held.drop(id)
		case err != nil:
			if ctx.Err() == nil {
				s.opts.Logger.Warn("check a held redacted call", "tool_call_id", id, "err", err)
			}
			return
		case store.ToolCallTerminal(c.Status):
			s.held.drop(id)
		case c.Status == store.ToolCallDispatched:
			s.startExec(c)
		}
	}
}

// heldCheckEvery paces the fallback check of held calls (notifications
// normally start them at once).
const heldCheckEvery = 2 * time.Second
