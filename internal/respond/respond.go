// Package respond writes JSON bodies and the structured error shape
// {"error":{"code","message"}} (DESIGN §2.7), logging server-side failures.
package respond

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/agentplane/agentplane/internal/store"
)

// Error is an API error with its HTTP status. Handlers return it (or wrap
// it) and Err renders it.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Extra fields merged into the error object (e.g. the current state on a 409).
	Details map[string]any `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// E builds an *Error.
func E(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

// JSON writes v with status.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// StoreRetryAfter is the Retry-After, in seconds, of a store_unavailable
// answer.
const StoreRetryAfter = 2

// As returns the API error err stands for: an *Error anywhere in the chain;
// for store.ErrUnavailable (the database cannot be reached or is out of
// connections), 503 store_unavailable with a retry_after, so clients back
// off and retry instead of seeing an internal error; nil for anything else
// (an internal error). Every surface (HTTP here, WebSocket in ingress) maps
// errors through it.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, store.ErrUnavailable) {
		return &Error{Status: http.StatusServiceUnavailable, Code: "store_unavailable",
			Message: "the database is unavailable; retry later", Details: map[string]any{"retry_after": StoreRetryAfter}}
	}
	return nil
}

// Err writes err as the structured error (see As); anything that is not an
// API error is a 500 whose detail is logged, not sent.
func Err(w http.ResponseWriter, r *http.Request, err error) {
	e := As(err)
	switch {
	case e == nil:
		slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		e = E(http.StatusInternalServerError, "internal", "internal error")
	case e.Code == "store_unavailable":
		slog.WarnContext(r.Context(), "request failed: store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	body := map[string]any{"code": e.Code, "message": e.Message}
	for k, v := range e.Details {
		body[k] = v
	}
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		if ra, ok := e.Details["retry_after"]; ok {
			w.Header().Set("Retry-After", toString(ra))
		}
	}
	JSON(w, e.Status, map[string]any{"error": body})
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// DecodeJSON reads a JSON object body of at most max bytes into v,
// refusing unknown trailing data. Errors are *Error values ready for Err.
func DecodeJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return E(http.StatusRequestEntityTooLarge, "request_too_large", "request body too large")
		}
		return E(http.StatusBadRequest, "invalid_json", "request body is not valid JSON: "+err.Error())
	}
	if dec.More() {
		return E(http.StatusBadRequest, "invalid_json", "trailing data after the JSON body")
	}
	return nil
}
