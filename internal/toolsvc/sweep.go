package toolsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// sweepBatch bounds the calls one sweep settles.
const sweepBatch = 200

func (s *Service) sweepLoop(ctx context.Context) {
	defer close(s.bgDone)
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	var lastHeld time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.opts.Logger.Warn("tool deadline sweep failed", "err", err)
			}
			if time.Since(lastHeld) >= heldCheckEvery && s.HeldArgs() > 0 {
				lastHeld = time.Now()
				s.claimHeld(ctx, nil)
			}
		}
	}
}

// Sweep enforces due deadlines (DESIGN §2.5): a call waiting for approval
// past the approval's expiry ends EXPIRED, a call running past its tool
// timeout ends TIMEOUT. Deadlines are columns, so this holds after a
// restart, and every change is guarded (the deadline must still be due and
// the state unchanged), so any number of replicas may sweep at once. It
// returns how many calls it settled.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.now()
	due, err := s.st.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: now, Limit: sweepBatch})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range due {
		settled := false
		_, err := s.commit(ctx, c.SessionID, c.RunID, func(st *step) error {
			settled = false
			var err error
			switch c.Status {
			case store.ToolCallWaitingApproval:
				_, err = st.expireApproval(c, now)
			case store.ToolCallDispatched, store.ToolCallRunning, store.ToolCallWaitingClient:
				_, err = st.timeOut(c, now)
				if err == nil && c.Kind == store.ToolKindAgent {
					// The call's execution is a child run: it stops with the call.
					err = st.endChild(c, "timeout", fmt.Sprintf("the %s tool call that started this run timed out after %d ms", c.ToolName, c.TimeoutMS))
				}
			default:
				return nil
			}
			if errors.Is(err, store.ErrConflict) {
				return errMovedOn // settled elsewhere meanwhile; roll back anything written
			}
			settled = err == nil
			return err
		})
		if errors.Is(err, errMovedOn) {
			continue
		}
		if err != nil {
			return n, err
		}
		if settled {
			n++
		}
	}
	return n, nil
}

// timeOut ends c TIMEOUT, its deadline having passed by now (guarded on it:
// a call whose deadline moved on is a conflict).
func (st *step) timeOut(c *store.ToolCall, now int64) (*store.ToolCall, error) {
	msg := fmt.Sprintf("no result within the tool timeout of %d ms", c.TimeoutMS)
	return st.finish(c, []string{c.Status}, store.ToolCallTimeout, nil, errorJSON("timeout", msg, nil), now)
}

// errMovedOn rolls back a sweep step whose call moved on meanwhile.
var errMovedOn = errors.New("tool call moved on")
