package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Defaults for the zero values of Client's fields.
const (
	// DefaultFirstByteTimeout is Client.FirstByteTimeout when unset.
	DefaultFirstByteTimeout = 30 * time.Second
	// DefaultIdleTimeout is Client.IdleTimeout when unset.
	DefaultIdleTimeout = 60 * time.Second
)

// Message is one chat message of a transcript.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// InvokeRequest is what the platform tells an agent about a run.
type InvokeRequest struct {
	AgentID     string
	SessionID   string
	RunID       string
	ParentRunID string // empty for a root run
	// Depth is 0 for a root run, the parent's depth plus one for a child.
	Depth  int
	UserID string
	// Traceparent is the W3C trace context header; empty or malformed means
	// Invoke sends a fresh one (see NewTraceparent).
	Traceparent  string
	InputMessage Message
	// Messages is the session transcript the agent may use as context.
	Messages []Message
	// IntentionID is the run's intention; ResumesRunID the INPUT_REQUIRED
	// run it answers, if any (DESIGN §12).
	IntentionID  string
	ResumesRunID string
	// Protocol is how the agent is spoken to: "" or "agentplane" (this
	// client), "a2a" (package a2aremote). Card is the stored A2A agent
	// card; RemoteTaskID and RemoteContextID the remote A2A task a resumed
	// run continues (and the context a new one joins).
	Protocol        string
	Card            json.RawMessage
	RemoteTaskID    string
	RemoteContextID string
	// Paused, when set, excuses silence: a timeout that fires while it
	// reports true is re-armed instead, because the agent is waiting on the
	// platform (an approval, a tool call, a child run) rather than stuck. It runs on a
	// timer goroutine, once per timeout period.
	Paused func() bool
}

// StreamEvent is one delta or state event from the agent, in stream order,
// or (type "remote_task", A2A agents only) the remote task the run is
// talking to, which the run records so a resumed run continues it.
type StreamEvent struct {
	Type   string // "delta", "state" or "remote_task"
	Text   string // delta text
	State  string // state name
	Detail json.RawMessage
	// RemoteTaskID and RemoteContextID (remote_task).
	RemoteTaskID    string
	RemoteContextID string
}

// Result is how the agent's turn ended: `event: done` (with its usage), or
// `event: input_required` (InputRequired set).
type Result struct {
	Usage json.RawMessage // nil when the agent sent none
	// InputRequired is set when the agent ended its turn asking the user
	// (DESIGN §12).
	InputRequired *InputRequest
}

// InputRequest is what an agent asked when it ended its turn with
// `event: input_required`.
type InputRequest struct {
	Question string
	Detail   json.RawMessage // nil when none
}

// Client invokes agents (DESIGN §5). The zero value is ready to use; a Client
// is safe for concurrent use.
type Client struct {
	// HTTP sends the requests. Nil means a shared NewHTTPClient(nil), which
	// reaches public addresses only.
	HTTP *http.Client
	// FirstByteTimeout bounds the time from sending the request to the
	// response's first bytes, and then each silence until the first event:
	// keep-alive comments count. An agent's first event may be long in
	// coming while its handler calls a slow tool or LLM, and the SDKs say
	// "still here" with keep-alives (seed 001 §1.2 names the wait for an
	// agent's first packet as a risk of cut connections). 0 means
	// DefaultFirstByteTimeout.
	FirstByteTimeout time.Duration
	// IdleTimeout bounds the silence between events once the first has
	// arrived; any bytes, keep-alive comments included, break the silence.
	// Time spent in the caller's handler does not count. 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxEventBytes bounds one SSE event; 0 means DefaultMaxEventBytes.
	MaxEventBytes int
}

var defaultHTTPClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(nil) })

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTPClient()
}

func (c *Client) firstByteTimeout() time.Duration {
	if c.FirstByteTimeout > 0 {
		return c.FirstByteTimeout
	}
	return DefaultFirstByteTimeout
}

func (c *Client) idleTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return DefaultIdleTimeout
}

type invokeBody struct {
	AgentID      string        `json:"agent_id"`
	SessionID    string        `json:"session_id"`
	RunID        string        `json:"run_id"`
	ParentRunID  string        `json:"parent_run_id,omitempty"`
	Depth        int           `json:"depth"`
	InputMessage Message       `json:"input_message"`
	Messages     []Message     `json:"messages"`
	Context      invokeContext `json:"context"`
	IntentionID  string        `json:"intention_id,omitempty"`
	ResumesRunID string        `json:"resumes_run_id,omitempty"`
}

type invokeContext struct {
	UserID string `json:"user_id"`
}

// Invoke runs one agent turn: it POSTs the request to endpoint+"/invoke" and
// reads the agent's event stream, calling h for every delta and state event
// in order. It returns the Result of `event: done`, or of
// `event: input_required`: that ends the agent's turn, and the request is
// closed at once whatever the agent sends after it.
//
// Errors: an error returned by h aborts the invoke and is returned as is; if
// ctx ends, the agent's request is closed at once and the error wraps
// ctx.Err(); anything else is an *InvokeError whose Code is one of the Code*
// constants or the code the agent sent in `event: error`.
func (c *Client) Invoke(ctx context.Context, endpoint string, req InvokeRequest, h func(StreamEvent) error) (*Result, error) {
	u, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, endpointFailure(err)
	}
	msgs := req.Messages
	if msgs == nil {
		msgs = []Message{} // agents get [], never null
	}
	body, err := json.Marshal(invokeBody{
		AgentID:      req.AgentID,
		SessionID:    req.SessionID,
		RunID:        req.RunID,
		ParentRunID:  req.ParentRunID,
		Depth:        req.Depth,
		InputMessage: req.InputMessage,
		Messages:     msgs,
		Context:      invokeContext{UserID: req.UserID},
		IntentionID:  req.IntentionID,
		ResumesRunID: req.ResumesRunID,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: encode invoke body: %w", err)
	}
	tp := req.Traceparent
	if !validTraceparent(tp) {
		tp = NewTraceparent()
	}

	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var connected atomic.Bool
	reqCtx = trackConnection(reqCtx, &connected)
	wd := newWatchdog(cancel, c.firstByteTimeout(), c.idleTimeout(), req.Paused)
	defer wd.stop()

	hreq, err := http.NewRequestWithContext(reqCtx, http.MethodPost, u.JoinPath("invoke").String(), bytes.NewReader(body))
	if err != nil {
		return nil, endpointFailure(invalidEndpoint(err, "cannot build request"))
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("traceparent", tp)
	hreq.Header.Set("x-session-id", req.SessionID)
	hreq.Header.Set("x-run-id", req.RunID)

	resp, err := c.httpClient().Do(hreq)
	if err != nil {
		return nil, failure(ctx, reqCtx, err, connected.Load())
	}
	defer resp.Body.Close()
	if err := checkResponse(resp, "text/event-stream"); err != nil {
		return nil, err
	}

	sse := NewSSEReader(&activityReader{r: resp.Body, onRead: wd.activity}, c.MaxEventBytes)
	for {
		ev, err := sse.Next()
		if err != nil {
			return nil, streamFailure(ctx, reqCtx, err)
		}
		se, res, err := decodeEvent(ev)
		if err != nil || res != nil {
			return res, err
		}
		if se == nil {
			continue
		}
		wd.pause()
		if err := h(*se); err != nil {
			return nil, err
		}
		wd.resume()
	}
}

// decodeEvent turns one SSE event into a StreamEvent for the handler, a
// Result (done), an error (the agent's error or a protocol error), or
// nothing (an untyped event with no data, which we skip).
func decodeEvent(ev SSEEvent) (*StreamEvent, *Result, error) {
	switch ev.Event {
	case "delta":
		if text, ok := plainDeltaText(ev.Data); ok {
			return &StreamEvent{Type: "delta", Text: text}, nil, nil
		}
		var d struct {
			Text string `json:"text"`
		}
		if err := decodeObject(ev.Data, &d); err != nil {
			return nil, nil, protocolError(err, "bad delta event")
		}
		return &StreamEvent{Type: "delta", Text: d.Text}, nil, nil
	case "state":
		var d struct {
			State  string          `json:"state"`
			Detail json.RawMessage `json:"detail"`
		}
		if err := decodeObject(ev.Data, &d); err != nil {
			return nil, nil, protocolError(err, "bad state event")
		}
		if d.State == "" {
			return nil, nil, protocolError(nil, "state event without a state")
		}
		return &StreamEvent{Type: "state", State: d.State, Detail: nonNull(d.Detail)}, nil, nil
	case "done":
		var d struct {
			Usage json.RawMessage `json:"usage"`
		}
		if strings.TrimSpace(ev.Data) != "" {
			if err := decodeObject(ev.Data, &d); err != nil {
				return nil, nil, protocolError(err, "bad done event")
			}
		}
		return nil, &Result{Usage: nonNull(d.Usage)}, nil
	case "input_required":
		var d struct {
			Question *string         `json:"question"`
			Detail   json.RawMessage `json:"detail"`
		}
		if err := decodeObject(ev.Data, &d); err != nil {
			return nil, nil, protocolError(err, "bad input_required event")
		}
		if d.Question == nil || strings.TrimSpace(*d.Question) == "" {
			return nil, nil, protocolError(nil, "input_required event without a question")
		}
		return nil, &Result{InputRequired: &InputRequest{Question: *d.Question, Detail: nonNull(d.Detail)}}, nil
	case "error":
		return nil, nil, agentError(ev.Data)
	case "":
		if strings.TrimSpace(ev.Data) == "" {
			return nil, nil, nil
		}
		return nil, nil, protocolError(nil, "event without an event type")
	default:
		return nil, nil, protocolError(nil, fmt.Sprintf("unknown event type %q", bounded(ev.Event, 64)))
	}
}

// agentError reports the agent's own failure. Its code is kept when it looks
// like a code; data that is not the expected JSON still ends the run as the
// agent meant, with the raw text as the message.
func agentError(data string) *InvokeError {
	var d struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if strings.TrimSpace(data) != "" && decodeObject(data, &d) != nil {
		d.Message = data
	}
	if !validCode(d.Code) {
		d.Code = CodeAgentError
	}
	if d.Message == "" {
		d.Message = "the agent reported an error"
	}
	return &InvokeError{Code: d.Code, Message: bounded(d.Message, 4<<10)}
}

func validCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// decodeObject insists on a JSON object, so "null" or a bare string is a
// protocol error rather than an empty event. Unknown fields are ignored.
func decodeObject(data string, v any) error {
	t := strings.TrimLeft(data, " \t\r\n")
	if !strings.HasPrefix(t, "{") {
		return errors.New("data is not a JSON object")
	}
	return json.Unmarshal([]byte(t), v)
}

func nonNull(m json.RawMessage) json.RawMessage {
	if len(m) == 0 || string(m) == "null" {
		return nil
	}
	return m
}

func protocolError(err error, msg string) *InvokeError {
	if err != nil {
		msg += ": " + err.Error()
	}
	return &InvokeError{Code: CodeAgentProtocolError, Message: msg, Err: err}
}

func endpointFailure(err error) error {
	var ee *EndpointError
	if errors.As(err, &ee) {
		return &InvokeError{Code: ee.Code, Message: ee.Message, Err: err}
	}
	return &InvokeError{Code: CodeInvalidEndpoint, Message: err.Error(), Err: err}
}

// failure classifies an error from sending the request. Whether a connection
// was ever made is what separates "unreachable" (DNS, refused, TLS) from a
// connection that broke before the response.
func failure(ctx, reqCtx context.Context, err error, connected bool) error {
	if ctx.Err() != nil {
		return fmt.Errorf("agent: request cancelled: %w", ctx.Err())
	}
	if ie, ok := context.Cause(reqCtx).(*InvokeError); ok {
		return ie
	}
	var ee *EndpointError
	if errors.As(err, &ee) {
		return &InvokeError{Code: ee.Code, Message: ee.Message, Err: err}
	}
	if !connected {
		return &InvokeError{Code: CodeAgentUnreachable, Message: "cannot connect to the agent: " + err.Error(), Err: err}
	}
	return &InvokeError{Code: CodeAgentDisconnected, Message: "the agent closed the connection before answering: " + err.Error(), Err: err}
}

// streamFailure classifies an error from reading the event stream.
func streamFailure(ctx, reqCtx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("agent: stream cancelled: %w", ctx.Err())
	case errors.Is(err, ErrEventTooLarge):
		return protocolError(err, "oversize event")
	}
	if ie, ok := context.Cause(reqCtx).(*InvokeError); ok {
		return ie
	}
	if errors.Is(err, io.EOF) {
		return &InvokeError{Code: CodeAgentDisconnected, Message: "the stream ended without done or error", Err: err}
	}
	return &InvokeError{Code: CodeAgentDisconnected, Message: "the stream broke before done or error: " + err.Error(), Err: err}
}

// checkResponse refuses a non-2xx status or, when wantType is set, another
// media type, quoting the start of the body so the operator sees why.
func checkResponse(resp *http.Response, wantType string) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &InvokeError{
			Code:    CodeAgentHTTPError,
			Status:  resp.StatusCode,
			Message: fmt.Sprintf("agent answered %s: %s", resp.Status, snippet(resp.Body)),
		}
	}
	if wantType == "" {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != wantType {
		return &InvokeError{
			Code:    CodeAgentHTTPError,
			Status:  resp.StatusCode,
			Message: fmt.Sprintf("agent answered Content-Type %q, want %s: %s", bounded(ct, 100), wantType, snippet(resp.Body)),
		}
	}
	return nil
}

// snippet reads at most 512 bytes of a body; read errors just shorten it.
func snippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 512))
	return bounded(strings.TrimSpace(string(b)), 512)
}

// bounded trims s to at most n bytes of valid UTF-8.
func bounded(s string, n int) string {
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func trackConnection(ctx context.Context, connected *atomic.Bool) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
}

// NewTraceparent returns a fresh W3C traceparent with a random trace id and
// parent id, sampled.
func NewTraceparent() string {
	var b [24]byte
	for {
		rand.Read(b[:])
		if !allZero(b[:16]) && !allZero(b[16:]) {
			break
		}
	}
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// validTraceparent accepts version 00 exactly as W3C Trace Context defines it.
func validTraceparent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	trace, parent, flags := s[3:35], s[36:52], s[53:]
	return lowerHex(trace) && lowerHex(parent) && lowerHex(flags) &&
		strings.Trim(trace, "0") != "" && strings.Trim(parent, "0") != ""
}

func lowerHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// activityReader tells the watchdog about every read that returned bytes,
// so keep-alive comments and partial events count as signs of life.
type activityReader struct {
	r      io.Reader
	onRead func()
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.onRead()
	}
	return n, err
}

// watchdog enforces Invoke's timeouts by cancelling the request context with
// an agent_timeout *InvokeError as the cause, so a blocked read returns at
// once. The invoking goroutine arms and stops it; the timer callback only
// cancels, or re-arms while the run is paused.
type watchdog struct {
	cancel    context.CancelCauseFunc
	first     time.Duration
	idle      time.Duration
	paused    func() bool
	mu        sync.Mutex
	t         *time.Timer
	heard     bool // bytes have arrived
	streaming bool // the first event has arrived
}

func newWatchdog(cancel context.CancelCauseFunc, first, idle time.Duration, paused func() bool) *watchdog {
	w := &watchdog{cancel: cancel, first: first, idle: idle, paused: paused}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arm(first, fmt.Sprintf("no response and first event from the agent within %s", first))
	return w
}

// arm starts the clock (w.mu held).
func (w *watchdog) arm(d time.Duration, why string) {
	w.t = time.AfterFunc(d, func() { w.fire(d, why) })
}

func (w *watchdog) fire(d time.Duration, why string) {
	if w.paused != nil && w.paused() {
		w.mu.Lock()
		w.t.Reset(d)
		w.mu.Unlock()
		return
	}
	w.cancel(&InvokeError{Code: CodeAgentTimeout, Message: why})
}

// activity restarts the clock: the idle deadline once events flow, the
// first event's deadline before (keep-alives from a busy handler).
func (w *watchdog) activity() {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.streaming:
		w.t.Reset(w.idle)
	case !w.heard:
		w.heard = true
		w.t.Stop()
		w.arm(w.first, fmt.Sprintf("the agent sent no event and was silent for more than %s", w.first))
	default:
		w.t.Reset(w.first)
	}
}

// pause stops the clock while the caller's handler runs: a slow consumer is
// not a silent agent.
func (w *watchdog) pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Stop()
}

// resume restarts the idle clock after an event, switching from the first
// byte deadline to the idle deadline after the first one.
func (w *watchdog) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streaming {
		w.t.Reset(w.idle)
		return
	}
	w.streaming = true
	w.t.Stop()
	w.arm(w.idle, fmt.Sprintf("the agent was silent for more than %s", w.idle))
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Stop()
}
