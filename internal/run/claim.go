package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// ErrInstanceInUse: another live process holds this process's instance id.
var ErrInstanceInUse = errors.New("instance id in use")

// claim makes this process the holder of its instance id. A process that
// shares an id with a live one would fail that one's runs as orphans and
// skip its notifications (issue 8, item 12), so a fresh heartbeat of
// another process refuses the start — unless watching the heartbeat for
// ClaimWait shows it stopped: then its process died a moment ago (a crash
// and a restart) and this one takes over, failing its runs.
func (m *Manager) claim(ctx context.Context) error {
	p := &store.InstanceClaimParams{InstanceID: m.opts.InstanceID, Process: m.opts.Process}
	for attempt := 0; ; attempt++ {
		now := m.now()
		p.At, p.AliveSince = now, now-m.opts.StaleAfter.Milliseconds()
		held, err := m.st.InstanceClaim(ctx, p)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, store.ErrConflict):
			return fmt.Errorf("claim instance id %q: %w", m.opts.InstanceID, err)
		case p.TakeOver != nil || attempt > 3:
			return m.inUse(held)
		}
		m.opts.Logger.Warn("another process has a fresh heartbeat under this instance id; checking whether it is alive",
			"instance_id", m.opts.InstanceID, "holder", held.Process, "wait", m.opts.ClaimWait)
		moved, err := m.watch(ctx, held)
		switch {
		case err != nil:
			return err
		case moved == nil: // released meanwhile: claim afresh
			p.TakeOver = nil
		case *moved != *held:
			return m.inUse(moved)
		default:
			p.TakeOver = held
		}
	}
}

// watch reads the instance's row until it differs from held or ClaimWait
// passes, and returns the last reading (nil: the row is gone).
func (m *Manager) watch(ctx context.Context, held *store.Instance) (*store.Instance, error) {
	deadline := time.Now().Add(m.opts.ClaimWait)
	step := min(250*time.Millisecond, m.opts.HeartbeatInterval/4)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(step):
		}
		cur, err := m.st.InstanceGet(ctx, held.InstanceID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("claim instance id %q: %w", held.InstanceID, err)
		case *cur != *held || !time.Now().Before(deadline):
			return cur, nil
		}
	}
}

func (m *Manager) inUse(held *store.Instance) error {
	age := time.Duration(m.now()-held.HeartbeatAt) * time.Millisecond
	return fmt.Errorf("%w: another agentplane process is running with instance id %q (its last heartbeat was %s ago); "+
		"every process sharing a database needs its own instance id: set AGENTPLANE_INSTANCE_ID (or --instance-id)",
		ErrInstanceInUse, m.opts.InstanceID, age.Round(time.Millisecond))
}
