package llmproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Error is an error the proxy itself answers with (as opposed to an upstream
// error, which is passed through verbatim). It is rendered as
// {"error":{"code":…,"message":…}}. An Authenticator returns one for 401 and
// 403.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfterMS, when positive, is sent as the Retry-After header (whole
	// seconds, rounded up) and as retry-after-ms.
	RetryAfterMS int64
	// RunID and RunStatus, on a 409 run_not_active, are the run's id and
	// state, as every conflict carries (API.md).
	RunID, RunStatus string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Error codes answered by the proxy.
const (
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotConfigured    = "llm_not_configured"
	CodeRequestTooLarge  = "request_too_large"
	CodeRateLimited      = "rate_limited"
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidRequest   = "invalid_request"
	CodeModelNotFound    = "model_not_found"
	CodeUpstreamTimeout  = "upstream_timeout"
	CodeUpstreamError    = "upstream_unreachable"
	CodeInternal         = "internal"
	CodeClientCancelled  = "client_cancelled"
	CodeUpstreamProtocol = "upstream_protocol_error"
	// CodeUpstreamStreamError is recorded, never answered, for an error
	// the upstream reported inside a stream without a code or type of its
	// own (those are recorded as they are, as for an error body).
	CodeUpstreamStreamError = "upstream_stream_error"
)

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		// As every other surface writes them on a 429 or 503 (API.md, Rate
		// limits): whole seconds, rounded up, and milliseconds.
		RetryAfter   int64  `json:"retry_after,omitempty"`
		RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
		RunID        string `json:"run_id,omitempty"`
		Status       string `json:"status,omitempty"`
	} `json:"error"`
}

// writeError renders err. An error that is not (and does not wrap) an *Error
// is answered 500 internal without its text, which may hold internals.
func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
	var b errorBody
	b.Error.Code, b.Error.Message = e.Code, e.Message
	b.Error.RunID, b.Error.Status = e.RunID, e.RunStatus
	if e.RetryAfterMS > 0 {
		b.Error.RetryAfter, b.Error.RetryAfterMS = (e.RetryAfterMS+999)/1000, e.RetryAfterMS
	}
	body, _ := json.Marshal(b)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if e.RetryAfterMS > 0 {
		h.Set("Retry-After", strconv.FormatInt(b.Error.RetryAfter, 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(e.RetryAfterMS, 10))
	}
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
