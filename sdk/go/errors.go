package agentplane

import (
	"errors"
	"fmt"
	"time"
)

// CodeAgentException is the error code sent when a handler fails with an
// error that is not an *Error (or panics). The Python SDK uses the same code,
// so the platform sees one code for "the agent's own code failed".
const CodeAgentException = "agent_exception"

// Error is an error a handler returns to end the run with
// `event: error {code, message}`. Code reaches the platform verbatim and
// fails the run with it, so keep it stable and machine-readable. Wrapped
// Errors (fmt.Errorf("…: %w", err)) are found with errors.As.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// APIError is a platform call that got a non-2xx answer. Code and Message
// come from the platform's {"error":{"code","message"}} body; a body without
// that shape gets Code "http_<status>" and its text as Message. Transport
// failures (no answer at all) are returned as ordinary wrapped errors.
type APIError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is how long the platform asked the caller to wait before
	// sending again: a 429 rate_limited answer's retry_after_ms (else its
	// retry_after, else its Retry-After header); 0 when it did not say.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("agentplane: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return msg
}

// ErrNotConfigured is returned by the methods of a nil *Client — what
// Request.Client gives when the handler has no platform configured — instead
// of a nil-pointer panic. Its text says what to set.
var ErrNotConfigured = errors.New("agentplane: no platform client: set " + EnvURL + " (the platform, e.g. http://127.0.0.1:8080) and " +
	EnvAgentKey + " (this agent's key: the agent_api_key registration returned), or set AgentHandler.Platform")
