package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// HandlerFunc runs one invocation of the agent. It streams output through s
// and returns nil to end the run with `event: done`, an *Error (possibly
// wrapped) to end it with that code, a *ToolError (an unhandled tool call
// failure) to end it with the tool call's code, a *SubAgentError (an
// unhandled child run failure) to end it with the child's code, or any other
// error to end it with CodeAgentException. A panic is recovered and reported like an error.
//
// ctx is cancelled when the platform closes the request (the run was
// cancelled) or the server shuts down; the handler should then return
// promptly. Pass ctx to every blocking call (LLM requests, tools).
type HandlerFunc func(ctx context.Context, req *Request, s Stream) error

// Default values of AgentHandler's fields.
const (
	DefaultKeepAlive    = 15 * time.Second
	DefaultMaxBodyBytes = 32 << 20 // the body carries the whole transcript
)

// AgentHandler is the agent's HTTP service: POST /invoke (an SSE stream of
// the handler's events) and GET /health. Mount it at the root of the
// agent's endpoint, or under a prefix with http.StripPrefix.
type AgentHandler struct {
	// Handler runs each invocation. Required.
	Handler HandlerFunc
	// Platform is the client that Request.Client returns copies of, bound
	// to each run. nil: Request.Client returns nil. NewAgentHandler sets it
	// from AGENTPLANE_URL and AGENTPLANE_AGENT_KEY.
	Platform *Client
	// KeepAlive is how long the stream may stay silent before a
	// `: keep-alive` comment is sent, so the platform's idle timeout does
	// not fire while the handler waits on something slow. 0 means
	// DefaultKeepAlive; negative disables keep-alives.
	KeepAlive time.Duration
	// MaxBodyBytes limits the /invoke body. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives handler failures, with run_id and session_id. nil
	// means slog.Default().
	Logger *slog.Logger

	once sync.Once
	mux  *http.ServeMux
}

// NewAgentHandler returns an AgentHandler for h whose Platform client comes
// from the environment (AGENTPLANE_URL, AGENTPLANE_AGENT_KEY); Platform is
// nil unless both are set. Adjust the fields before serving.
func NewAgentHandler(h HandlerFunc) *AgentHandler {
	return &AgentHandler{Handler: h, Platform: clientFromEnv()}
}

// ServeHTTP implements http.Handler.
func (a *AgentHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.once.Do(func() {
		a.mux = http.NewServeMux()
		a.mux.HandleFunc("GET /health", a.health) // GET patterns match HEAD too
		a.mux.HandleFunc("POST /invoke", a.invoke)
	})
	a.mux.ServeHTTP(w, r)
}

func (a *AgentHandler) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (a *AgentHandler) invoke(w http.ResponseWriter, r *http.Request) {
	limit := a.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	// Read the body to EOF, not just one JSON value: net/http only starts
	// watching the connection for a disconnect (which cancels r.Context)
	// once the body is consumed.
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("body exceeds %d bytes", limit))
			return
		}
		writeError(w, http.StatusBadRequest, "bad_request", "read body: "+err.Error())
		return
	}
	var body invokeBody
	if err := json.Unmarshal(raw, &body); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body is not a valid invoke request: "+err.Error())
		return
	}
	req := newRequest(&body, r.Header, a.Platform)
	ctx := r.Context()
	log := a.logger().With("run_id", req.RunID, "session_id", req.SessionID)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	// Reverse proxies (nginx) buffer responses unless told not to, which
	// would hold every delta back.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := newSSEStream(ctx, w)
	// Send the headers now: the platform's first-byte timer is running.
	s.mu.Lock()
	_ = s.rc.Flush()
	s.mu.Unlock()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	if ka := a.keepAlive(); ka > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.keepAlive(ka, stop)
		}()
	}
	// Nothing may write to w once ServeHTTP has returned (net/http
	// reuses the connection's buffers): the keep-alive goroutine must be
	// gone and the stream closed, so that a goroutine the handler started
	// gets ErrStreamClosed. Deferred so a re-raised http.ErrAbortHandler
	// panic does it too; then a write stuck on a platform that does not
	// read is cut short first, so that it does not hold up the abort.
	aborted := true
	defer func() {
		if aborted {
			_ = s.rc.SetWriteDeadline(time.Now())
		}
		s.close()
		close(stop)
		wg.Wait()
	}()

	herr := a.run(ctx, req, s, log)
	aborted = false
	if ctx.Err() != nil {
		// The platform closed the request: nobody is left to read a
		// terminal event.
		s.close()
		log.DebugContext(ctx, "run cancelled by the platform", "err", herr)
		return
	}
	a.finish(s, herr, log)
}

// run calls the handler, turning a panic into an error. http.ErrAbortHandler
// is re-raised: it is how a handler asks net/http to drop the connection.
func (a *AgentHandler) run(ctx context.Context, req *Request, s Stream, log *slog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			log.ErrorContext(ctx, "agent handler panicked", "panic", p, "stack", string(debug.Stack()))
			err = &Error{Code: CodeAgentException, Message: fmt.Sprintf("panic: %v", p)}
		}
	}()
	return a.Handler(ctx, req, s)
}

// finish writes the one terminal event, unless the handler ended its turn
// with Stream.InputRequired.
func (a *AgentHandler) finish(s *sseStream, herr error, log *slog.Logger) {
	s.mu.Lock()
	ended := s.closed
	s.mu.Unlock()
	if ended {
		if herr != nil {
			log.Debug("handler error after input_required ends nothing", "err", herr)
		}
		return
	}
	var ire *InputRequiredError
	// A blank question (the platform fails the run on it) falls through
	// to an error event that says what went wrong.
	if errors.As(herr, &ire) && strings.TrimSpace(ire.Question) != "" {
		// Encode first, so a detail that cannot be sent becomes an error
		// event rather than a stream with no terminal event at all.
		ev, err := encodeEvent("input_required", inputRequiredData{Question: ire.Question, Detail: ire.Detail})
		if err != nil {
			herr = &Error{Code: CodeAgentException, Message: err.Error()}
		} else {
			if err := s.write(ev, true); err != nil && !errors.Is(err, ErrStreamClosed) {
				log.Warn("write input_required event", "err", err)
			}
			return
		}
	}
	if herr == nil {
		// Encode the usage first, so a bad or oversize value becomes an
		// error event rather than a stream with no terminal event at all.
		ev, err := encodeEvent("done", doneData{Usage: s.getUsage()})
		if err != nil {
			herr = &Error{Code: CodeAgentException, Message: "usage: " + err.Error()}
		} else {
			if err := s.write(ev, true); err != nil && !errors.Is(err, ErrStreamClosed) {
				log.Warn("write done event", "err", err)
			}
			return
		}
	}
	var e *Error
	data := errorData{Code: CodeAgentException, Message: herr.Error()}
	if errors.As(herr, &e) {
		data = errorData{Code: e.Code, Message: e.Message}
		if data.Code == "" {
			data.Code = CodeAgentException
		}
		log.Debug("run ended with an agent error", "code", e.Code, "message", e.Message)
	} else if te := (*ToolError)(nil); errors.As(herr, &te) {
		// A tool call failure the handler did not handle: the run ends with
		// the tool call's code ("rejected", "client_offline"…), as it would
		// under on_failure: fail_run.
		data = errorData{Code: te.Code, Message: te.Error()}
		log.Debug("run ended with a tool call failure", "code", te.Code, "tool_call_id", te.ToolCallID)
	} else if se := (*SubAgentError)(nil); errors.As(herr, &se) {
		// A child run's failure (or a refused agent call) the handler did
		// not handle: the run ends with the child's code.
		data = errorData{Code: se.Code, Message: se.Error()}
		log.Debug("run ended with a sub-agent failure", "code", se.Code, "child_run_id", se.RunID)
	} else {
		log.Error("agent handler failed", "err", herr)
	}
	data.Message = truncateUTF8(data.Message, maxErrorMessageBytes)
	if err := s.send("error", data, true); err != nil && !errors.Is(err, ErrStreamClosed) {
		log.Warn("write error event", "err", err)
	}
}

// truncateUTF8 is s cut to at most n bytes, at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (a *AgentHandler) keepAlive() time.Duration {
	if a.KeepAlive == 0 {
		return DefaultKeepAlive
	}
	return a.KeepAlive
}

func (a *AgentHandler) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]errorData{"error": {Code: code, Message: message}})
}

// Serve serves h on addr (e.g. "127.0.0.1:9001") until ctx is done, with the
// Platform client taken from the environment (see NewAgentHandler). It
// returns nil after a shutdown caused by ctx.
func Serve(ctx context.Context, addr string, h HandlerFunc) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("agentplane: listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, NewAgentHandler(h))
}

// ShutdownGrace is how long ServeListener lets in-flight runs finish after
// ctx is done before it closes their connections (which cancels their
// handlers' contexts).
const ShutdownGrace = 10 * time.Second

// ServeListener serves h on ln until ctx is done, then shuts down: in-flight
// runs get ShutdownGrace to finish. Use it to learn the port before serving
// (listen on ":0", register ln.Addr() with the platform, then serve). It
// returns nil after a shutdown caused by ctx, else the serving error.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: it would cut every stream longer than it.
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("agentplane: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("agentplane: serve: %w", err)
	}
	return nil
}
