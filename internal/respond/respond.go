// Package respond writes JSON bodies and the structured error shape
// {"error":{"code","message"}} (DESIGN §2.7), logging server-side failures.
package respond

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
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

// Err writes err as the structured error. An *Error (anywhere in the chain)
// keeps its status and code; anything else is a 500 whose detail is logged,
// not sent.
func Err(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		e = E(http.StatusInternalServerError, "internal", "internal error")
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
