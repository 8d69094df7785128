package toolsvc

import (
	"context"
	"net/http"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
)

// API errors (DESIGN §2.7): each is answered as {"error":{code,message}}.
var (
	ErrToolNotFound        = respond.E(http.StatusNotFound, "tool_not_found", "no such tool")
	ErrToolCallNotFound    = respond.E(http.StatusNotFound, "tool_call_not_found", "no such tool call")
	ErrApprovalNotFound    = respond.E(http.StatusNotFound, "approval_not_found", "no such approval")
	ErrRunNotFound         = respond.E(http.StatusNotFound, "run_not_found", "no such run")
	ErrRunNotActive        = respond.E(http.StatusConflict, "run_not_active", "the run has already ended")
	ErrRunForbidden        = respond.E(http.StatusForbidden, "forbidden", "the run is not this agent's")
	ErrToolForbidden       = respond.E(http.StatusForbidden, "forbidden", "this agent may not call the tool")
	ErrIdempotencyConflict = respond.E(http.StatusConflict, "idempotency_conflict", "the idempotency key was used for a call with different args")
)

// conflict is a 409 carrying the current state, so the caller sees why.
func conflict(code, message string, details map[string]any) *respond.Error {
	e := respond.E(http.StatusConflict, code, message)
	e.Details = details
	return e
}

func badRequest(code, message string) *respond.Error {
	return respond.E(http.StatusBadRequest, code, message)
}

// runEnded is ErrRunNotActive naming the run's state, as every 409 does
// (DESIGN §2.2); read only on this path, once the call was refused.
func (s *Service) runEnded(ctx context.Context, runID string) error {
	r, err := s.st.RunGet(ctx, runID)
	if err != nil {
		return ErrRunNotActive
	}
	return run.NotActive(r)
}
