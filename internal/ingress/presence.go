package ingress

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// presenceFlushWait bounds how long an agent_invoke waits for its session's
// presence to be recorded before the run starts.
const presenceFlushWait = 2 * time.Second

// presence writes through, per session, whether this process has
// connections following it (Options.Presence), so a client tool dispatched
// by another process finds the session's client (DESIGN §8). Only the flips
// 0 → 1 and 1 → 0 are written: a session's tabs coming and going cost no
// writes. Writes run on one goroutine per session at a time, in order, and
// always write the latest wish, so a burst of flips costs at most two
// writes and callers never wait for the database.
type presence struct {
	fn  func(ctx context.Context, sessionID string, connections int) error
	log *slog.Logger

	ctx    context.Context // cancelled by stop: writers give up
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*presenceState
	stopped  bool
}

type presenceState struct {
	want    int           // 1 when local connections follow the session, else 0
	written int           // what the store holds for us (0: no row)
	done    chan struct{} // closed when the running writer has caught up; nil when none runs
}

func newPresence(fn func(ctx context.Context, sessionID string, connections int) error, log *slog.Logger) *presence {
	p := &presence{fn: fn, log: log, sessions: map[string]*presenceState{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// set records the wish for sessionID (connections > 0 or not) and starts
// its writer if none runs. It never blocks on the database.
func (p *presence) set(sessionID string, connected bool) {
	if p == nil {
		return
	}
	want := 0
	if connected {
		want = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	st := p.sessions[sessionID]
	if st == nil {
		if want == 0 {
			return
		}
		st = &presenceState{}
		p.sessions[sessionID] = st
	}
	st.want = want
	if st.done == nil && st.want != st.written {
		st.done = make(chan struct{})
		p.wg.Add(1)
		go p.write(sessionID, st)
	}
}

// write brings the store in line with st.want until they agree. A failed
// write is retried (with backoff) while the wish still differs, because a
// lost 1 makes other processes fail the session's client tools.
func (p *presence) write(sessionID string, st *presenceState) {
	defer p.wg.Done()
	backoff := 50 * time.Millisecond
	p.mu.Lock()
	for st.want != st.written {
		n := st.want
		p.mu.Unlock()
		err := p.fn(p.ctx, sessionID, n)
		if err == nil {
			p.mu.Lock()
			st.written = n
			continue
		}
		if p.ctx.Err() != nil {
			p.mu.Lock()
			break
		}
		p.log.Warn("record client presence failed; retrying", "session_id", sessionID, "connections", n, "err", err)
		select {
		case <-p.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		p.mu.Lock()
		if p.ctx.Err() != nil {
			break
		}
	}
	close(st.done)
	st.done = nil
	if st.want == 0 && st.written == 0 {
		delete(p.sessions, sessionID)
	}
	p.mu.Unlock()
}

// flushed waits (bounded by ctx and presenceFlushWait) until what was set
// for sessionID is in the store.
func (p *presence) flushed(ctx context.Context, sessionID string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	var done chan struct{}
	if st := p.sessions[sessionID]; st != nil {
		done = st.done
	}
	p.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(presenceFlushWait)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
}

// stop lets writers finish until ctx ends, then abandons the rest; later
// sets are ignored. The caller drops this process's rows afterwards
// (store.SessionClientsDeleteInstance), which covers whatever was abandoned.
func (p *presence) stop(ctx context.Context) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	idle := make(chan struct{})
	go func() { p.wg.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-ctx.Done():
		p.cancel()
		<-idle
	}
	p.cancel()
}
