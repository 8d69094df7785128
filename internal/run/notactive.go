package run

import (
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// NotActive is ErrRunNotActive for one run, carrying its current state as
// every conflict does (DESIGN §2.2) on every surface — HTTP, WebSocket,
// A2A, the tool API. It still matches errors.Is(err, ErrRunNotActive).
func NotActive(r *store.Run) error {
	e := *ErrRunNotActive
	e.Message += " (it is " + r.Status + ")"
	e.Details = map[string]any{"run_id": r.RunID, "status": r.Status}
	return runEndedError{&e}
}

type runEndedError struct{ e *respond.Error }

func (x runEndedError) Error() string        { return x.e.Error() }
func (x runEndedError) Unwrap() error        { return x.e }
func (x runEndedError) Is(target error) bool { return target == ErrRunNotActive }
