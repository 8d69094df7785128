// Package respond writes JSON bodies and the structured error shape
// {"error":{"code","message"}} (DESIGN §2.7), logging server-side failures.
package respond

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"

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

// ErrorCode is the code a span's status carries (tracing.End).
func (e *Error) ErrorCode() string { return e.Code }

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

// Err writes err as the structured error (see As). Anything that is not an
// API error is a 500 whose detail is logged, not sent — except when the
// client has gone away and the error is only that (its context ended): that
// is not a server failure and is not logged as one.
func Err(w http.ResponseWriter, r *http.Request, err error) {
	e := As(err)
	switch {
	case e == nil && Cancelled(r.Context(), err):
		slog.DebugContext(r.Context(), "request cancelled by the client", "method", r.Method, "path", r.URL.Path, "err", err)
		e = E(StatusClientClosedRequest, "request_cancelled", "the request was cancelled")
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

// StatusClientClosedRequest answers a request whose client went away (the
// status nginx made common); nobody reads it, but logs and metrics do.
const StatusClientClosedRequest = 499

// Cancelled reports whether err only says that ctx — a request's or a
// connection's — ended: the client went away, so the failure is theirs.
func Cancelled(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// DecodeJSON reads a JSON object body of at most max bytes into v,
// refusing trailing data. Fields v does not have are ignored. Errors are
// *Error values ready for Err (BodyError).
func DecodeJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	return decode(w, r, max, v, false)
}

// DecodeJSONStrict is DecodeJSON refusing fields v does not have, for
// bodies where a misspelt field would silently change what is stored
// (registrations, tool definitions).
func DecodeJSONStrict(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	return decode(w, r, max, v, true)
}

func decode(w http.ResponseWriter, r *http.Request, max int64, v any, strict bool) error {
	r.Body = http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(r.Body)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return BodyError(err)
	}
	if dec.More() {
		return E(http.StatusBadRequest, "invalid_json", "trailing data after the JSON body")
	}
	return nil
}

// ReadBody reads r's body, at most limit bytes, and answers a failure as a
// JSON body's decoding does (BodyError): 413 naming the limit, 408 when it
// did not arrive within the server's body read deadline; 400 for a body
// the connection lost.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, BodyError(err)
		}
		return nil, E(http.StatusBadRequest, "invalid_request", "cannot read the request body")
	}
	return b, nil
}

// BodyError turns a failure to read or decode a JSON request body into
// the API error: 413 request_too_large naming the limit, 408
// request_timeout when the body did not arrive in time, or 400
// invalid_json saying what is wrong in the body's terms (JSONMessage).
func BodyError(err error) *Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return E(http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds "+Size(mbe.Limit))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The server's body read deadline (--body-read-timeout) passed.
		return E(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
	}
	return E(http.StatusBadRequest, "invalid_json", JSONMessage(err))
}

// JSONMessage describes an encoding/json decoding error for the person who
// sent the JSON: the field and what it should have been, never Go's names
// for our types ("capabilities: expected an array of strings, got string",
// not "json: cannot unmarshal string into Go struct field
// RegisterRequest.capabilities of type []string"). It is the one place such
// errors are worded, for HTTP bodies and WebSocket messages alike.
func JSONMessage(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	case errors.As(err, &se):
		return "invalid JSON at byte " + strconv.FormatInt(se.Offset, 10) + ": " + se.Error()
	case errors.As(err, &te):
		msg := "expected " + describe(te.Type) + ", got " + te.Value
		if te.Field != "" {
			msg = te.Field + ": " + msg
		}
		return msg
	}
	// Unknown fields ("json: unknown field \"x\"") and errors of custom
	// decoders carry no type names; only the package prefix goes.
	return strings.TrimPrefix(err.Error(), "json: ")
}

// describe names what a JSON value must be to decode into t.
func describe(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + plural(t.Elem())
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

func plural(t reflect.Type) string {
	switch d := describe(t); d {
	case "true or false":
		return "booleans"
	case "another value":
		return "values"
	default:
		// "a string" -> "strings", "an array of x" -> "arrays of x".
		d = d[strings.IndexByte(d, ' ')+1:]
		if head, rest, ok := strings.Cut(d, " "); ok {
			return head + "s " + rest
		}
		return d + "s"
	}
}

// Size writes a byte limit as people read it: "1 MiB", "4 KiB", "1000 bytes".
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
