package mcpserver

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/agentplane/agentplane/internal/respond"
)

// The go-sdk's Streamable HTTP handler refuses some requests itself, with
// http.Error: a plain-text body ("session user mismatch", "session not
// found", "malformed payload: …"). Every HTTP refusal of the platform is
// {"error":{"code","message"}} (DESIGN §2.7), so envelope rewrites those,
// and only those: an error status whose body is text/plain. JSON-RPC
// answers (application/json, even with a 4xx status) and event streams
// pass through untouched.

// maxRefusalText bounds the SDK text kept for an error's message.
const maxRefusalText = 1024

// envelope wraps next so that its plain-text refusals are structured errors.
func (s *Server) envelope(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &errorWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r)
		if ew.status == 0 {
			return
		}
		text := strings.TrimSpace(string(ew.text))
		e := sdkRefusal(ew.status, text)
		if e.Status >= http.StatusInternalServerError {
			s.opts.Logger.Warn("MCP request failed in the MCP SDK", "status", e.Status, "err", text)
		}
		// http.Error's own headers describe the text, not the JSON.
		w.Header().Del("X-Content-Type-Options")
		respond.Err(w, r, e)
	})
}

// sdkRefusal is the structured error of a plain-text refusal of the SDK.
func sdkRefusal(status int, text string) *respond.Error {
	code, message := "", text
	switch status {
	case http.StatusBadRequest:
		code = "invalid_request"
		if strings.HasPrefix(text, "malformed payload") {
			code = "invalid_json"
		}
	case http.StatusUnauthorized:
		code = "unauthorized"
	case http.StatusForbidden:
		code = "forbidden"
		if text == "session user mismatch" {
			message = "the MCP session belongs to another run: an Mcp-Session-Id is bound to the x-run-id that created it"
		}
	case http.StatusNotFound:
		// The only thing the handler looks up is the session.
		code = "session_not_found"
		message = "no such MCP session here (" + text + "): it ended, expired or lives in another process; start a new session"
	case http.StatusMethodNotAllowed:
		code = "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		code = "request_too_large"
	case http.StatusInternalServerError:
		code = "internal"
	default:
		// e.g. 409 conflict, 415 unsupported_media_type.
		code = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
		if code == "" {
			code = "http_error"
		}
	}
	if message == "" {
		message = http.StatusText(status)
	}
	return respond.E(status, code, message)
}

// errorWriter holds back an error status written with a text/plain body
// (http.Error), and the text, for envelope to answer instead; anything
// else goes straight to the ResponseWriter.
type errorWriter struct {
	http.ResponseWriter
	status int    // the held error status; 0: none
	text   []byte // its body
	sent   bool   // the header went through
}

func (w *errorWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if !w.sent && code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = code
		return
	}
	w.sent = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *errorWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		if room := maxRefusalText - len(w.text); room > 0 {
			w.text = append(w.text, p[:min(len(p), room)]...)
		}
		return len(p), nil
	}
	w.sent = true
	return w.ResponseWriter.Write(p)
}

// Flush keeps event streams flowing (the SDK flushes through
// http.ResponseController); a held error is written whole at the end.
func (w *errorWriter) Flush() {
	_ = w.FlushError()
}

// FlushError is what http.ResponseController looks for first.
func (w *errorWriter) FlushError() error {
	if w.status != 0 {
		return nil
	}
	w.sent = true
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath (deadlines,
// full duplex).
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sdkLogger is the logger handed to the go-sdk: its attributes grouped
// under "mcp", so that its session_id (the MCP session's id) reads
// mcp.session_id and never passes for the platform's ses_… (DESIGN §14).
func sdkLogger(l *slog.Logger) *slog.Logger { return l.WithGroup("mcp") }
