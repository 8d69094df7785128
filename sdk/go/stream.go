package agentplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Stream sends a run's events to the platform. Each event is written and
// flushed before the method returns. Methods are safe for concurrent use.
// Do not use a Stream after the HandlerFunc has returned: the terminal event
// (done or error) is written by the SDK from the handler's return value.
type Stream interface {
	// Delta sends `event: delta {"text": text}`. An empty text is skipped;
	// a long one is sent as several consecutive deltas, each under the
	// platform's event bound (ErrEventTooLarge), which it joins again.
	Delta(text string) error
	// State sends `event: state {"state": state, "detail": detail}`; a nil
	// detail is sent as {}. state must not be empty (the platform fails
	// the run on such an event, so it is not sent and an error is
	// returned); detail must marshal as JSON, and the event must
	// stay under the platform's bound: a larger one is not sent and an
	// error wrapping ErrEventTooLarge is returned.
	State(state string, detail any) error
	// SetUsage records the usage reported in the closing
	// `event: done {"usage": usage}`; nil reports {}. It must marshal as JSON.
	SetUsage(usage any)
	// InputRequired ends the agent's turn asking the user (DESIGN §12):
	// `event: input_required {"question": question, "detail": detail}`
	// (a nil detail is left out). The run ends INPUT_REQUIRED, and the
	// user's answer starts a new run that resumes it (Request.ResumesRunID).
	// It is the stream's last event: the handler should return right after
	// (its return value is then not sent), and later calls get
	// ErrStreamClosed. question must not be empty or only white space (it
	// is not sent: the platform would fail the run); an event over the
	// platform's bound is not sent (ErrEventTooLarge) and ends nothing.
	InputRequired(question string, detail any) error
}

// InputRequiredError ends a handler's turn asking the user when the handler
// returns it, as Stream.InputRequired does (DESIGN §12). AgentStream.Text
// returns one when the called agent asked back (RunID is then that child
// run's), so `return err` passes the child's question on to the user.
type InputRequiredError struct {
	Question string
	Detail   any
	RunID    string
}

func (e *InputRequiredError) Error() string {
	return "agentplane: input required: " + e.Question
}

// ErrStreamClosed is returned by Stream methods called after the handler
// has returned.
var ErrStreamClosed = errors.New("agentplane: stream closed")

// ErrEventTooLarge is wrapped by the error of a Stream method whose event
// would exceed maxEventBytes: the platform fails the whole run
// (agent_protocol_error) on such an event, so it is not sent.
var ErrEventTooLarge = errors.New("agentplane: event over the platform's 1 MiB bound")

// maxEventBytes is the platform's bound on one SSE event from an agent
// (API.md "Limits"): its field lines, "event: …" and "data: …" included.
const maxEventBytes = 1 << 20

// deltaChunkBytes is how much text one delta event carries at most. JSON
// encodes a byte as at most 6 (\u003c for "<", \ufffd for a stray byte;
// a 3-byte U+2028 as 6 too), so a chunk encodes to under 768 KiB: always
// within maxEventBytes, whatever the text.
const deltaChunkBytes = 128 << 10

// maxErrorMessageBytes bounds the message of the error event the SDK writes
// from a handler's error: the platform keeps only its first 4 KiB, and a
// message over maxEventBytes would cost the run its code.
const maxErrorMessageBytes = 64 << 10

// keepAliveLine is an SSE comment: parsers ignore it, but it resets the
// platform's idle timer while a handler is busy and silent.
var keepAliveLine = []byte(": keep-alive\n\n")

// sseStream writes events to an http.ResponseWriter. One mutex orders the
// handler's writes and the keep-alive goroutine's.
type sseStream struct {
	ctx context.Context
	w   http.ResponseWriter
	rc  *http.ResponseController

	mu        sync.Mutex
	closed    bool
	err       error // first write error; every later call returns it
	usage     any
	lastWrite time.Time
}

func newSSEStream(ctx context.Context, w http.ResponseWriter) *sseStream {
	return &sseStream{ctx: ctx, w: w, rc: http.NewResponseController(w), lastWrite: time.Now()}
}

type deltaData struct {
	Text string `json:"text"`
}

type stateData struct {
	State  string `json:"state"`
	Detail any    `json:"detail"`
}

type inputRequiredData struct {
	Question string `json:"question"`
	Detail   any    `json:"detail,omitempty"`
}

type doneData struct {
	Usage any `json:"usage"`
}

type errorData struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Delta implements Stream.
func (s *sseStream) Delta(text string) error {
	if text == "" {
		return nil // an empty delta tells the user nothing
	}
	if len(text) <= deltaChunkBytes {
		return s.send("delta", deltaData{Text: text}, false)
	}
	// Cut long text into chunks the platform accepts, at rune boundaries
	// so no character is split into two invalid halves, and write them in
	// one go so a concurrent Delta cannot land between them.
	var b bytes.Buffer
	for text != "" {
		n := len(text)
		if n > deltaChunkBytes {
			n = deltaChunkBytes
			for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(text[n]); i++ {
				n--
			}
		}
		ev, err := encodeEvent("delta", deltaData{Text: text[:n]})
		if err != nil {
			return err
		}
		b.Write(ev)
		text = text[n:]
	}
	return s.write(b.Bytes(), false)
}

// State implements Stream.
func (s *sseStream) State(state string, detail any) error {
	if state == "" {
		// The platform fails the run (agent_protocol_error) on a state
		// event without a state: refuse it here, where it costs nothing.
		return errors.New("agentplane: State needs a state name")
	}
	if detail == nil {
		detail = struct{}{}
	}
	return s.send("state", stateData{State: state, Detail: detail}, false)
}

// InputRequired implements Stream.
func (s *sseStream) InputRequired(question string, detail any) error {
	if strings.TrimSpace(question) == "" {
		// As the platform reads it: a blank question fails the run
		// (agent_protocol_error), so it is not sent.
		return errors.New("agentplane: InputRequired needs a question")
	}
	return s.send("input_required", inputRequiredData{Question: question, Detail: detail}, true)
}

// SetUsage implements Stream.
func (s *sseStream) SetUsage(usage any) {
	s.mu.Lock()
	s.usage = usage
	s.mu.Unlock()
}

func (s *sseStream) getUsage() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.usage == nil {
		return struct{}{}
	}
	return s.usage
}

// send encodes and writes one event. terminal closes the stream to the
// handler: later calls get ErrStreamClosed.
func (s *sseStream) send(event string, data any, terminal bool) error {
	b, err := encodeEvent(event, data)
	if err != nil {
		return err
	}
	return s.write(b, terminal)
}

// write writes encoded events at once.
func (s *sseStream) write(b []byte, terminal bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStreamClosed
	}
	if terminal {
		s.closed = true
	}
	return s.writeLocked(b)
}

// encodeEvent is one event on the wire; an event over maxEventBytes is an
// error wrapping ErrEventTooLarge.
func encodeEvent(event string, data any) ([]byte, error) {
	payload, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("agentplane: encode %s event: %w", event, err)
	}
	var b bytes.Buffer
	b.Grow(len(event) + len(payload) + 16)
	b.WriteString("event: ")
	b.WriteString(event)
	b.WriteString("\ndata: ")
	b.Write(payload) // compact JSON has no raw newlines: one data line
	b.WriteString("\n\n")
	if b.Len() > maxEventBytes {
		return nil, fmt.Errorf("agentplane: %s event of %d bytes: %w", event, b.Len(), ErrEventTooLarge)
	}
	return b.Bytes(), nil
}

func (s *sseStream) writeLocked(p []byte) error {
	if s.err != nil {
		return s.err
	}
	if err := s.ctx.Err(); err != nil {
		// The platform closed the request (run cancelled): writing would
		// only fail later and less clearly.
		s.err = fmt.Errorf("agentplane: run cancelled: %w", err)
		return s.err
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = fmt.Errorf("agentplane: write event: %w", err)
		return s.err
	}
	// Flush every event: the platform shows deltas as they come, so a
	// buffered one is a late one.
	if err := s.rc.Flush(); err != nil {
		s.err = fmt.Errorf("agentplane: flush event: %w", err)
		return s.err
	}
	s.lastWrite = time.Now()
	return nil
}

// close stops the stream without a terminal event (the client is gone).
func (s *sseStream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// keepAlive writes a comment whenever the stream has been silent for
// interval, until stop is closed or the request ends.
func (s *sseStream) keepAlive(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.closed || s.err != nil {
			s.mu.Unlock()
			return
		}
		next := interval - time.Since(s.lastWrite)
		if next <= 0 {
			_ = s.writeLocked(keepAliveLine) // a failure is kept in s.err for the handler to see
			next = interval
		}
		s.mu.Unlock()
		t.Reset(next)
	}
}
