package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// DefaultMaxEventBytes bounds one SSE event when no other bound is given.
const DefaultMaxEventBytes = 1 << 20

// ErrEventTooLarge is returned (wrapped) by SSEReader.Next when an event's
// field lines exceed the reader's bound.
var ErrEventTooLarge = errors.New("sse: event too large")

// SSEEvent is one dispatched server-sent event.
type SSEEvent struct {
	// Event is the event type; empty when the stream named none (the
	// spec's default type "message").
	Event string
	// Data is the data lines joined with "\n".
	Data string
	// ID is the last event ID seen on the stream so far; per the spec it
	// carries over to later events that have no id field.
	ID string
}

// SSEReader parses a text/event-stream as the WHATWG HTML spec
// ("Interpreting an event stream") says: lines end in LF, CRLF or CR; a
// leading UTF-8 BOM is skipped; comment lines are ignored; an event is
// dispatched at a blank line if it has data; an unterminated event at EOF is
// discarded.
//
// Memory is bounded: the field lines of one event (comments and line ends
// not counted) may total at most the reader's maxEventBytes, else Next fails
// with ErrEventTooLarge. Comment lines are skipped as they stream past and
// never buffered, whatever their length. Work is linear in the input.
type SSEReader struct {
	src   io.Reader
	max   int
	buf   []byte
	r, w  int
	rerr  error // error from src, returned once buf is drained
	err   error // sticky error returned by Next
	bomOK bool  // the BOM check has run

	skipLF  bool   // the previous line ended in CR: a following LF is part of it
	inLine  bool   // the current line has begun
	comment bool   // the current line is a comment: discard it
	line    []byte // the current line when it spans reads

	size   int    // bytes of field lines in the current event
	data   []byte // data buffer: each data line plus "\n"
	event  string
	lastID string
	retry  time.Duration
}

// NewSSEReader returns a reader of r that refuses events over maxEventBytes
// (≤ 0 means DefaultMaxEventBytes).
func NewSSEReader(r io.Reader, maxEventBytes int) *SSEReader {
	if maxEventBytes <= 0 {
		maxEventBytes = DefaultMaxEventBytes
	}
	return &SSEReader{src: r, max: maxEventBytes, buf: make([]byte, 32<<10)}
}

// Retry returns the reconnection time the stream last set with a retry
// field, or 0 if it set none.
func (r *SSEReader) Retry() time.Duration { return r.retry }

// Next returns the next event. It returns io.EOF when the stream ends
// cleanly (an unfinished event is discarded), an error wrapping
// ErrEventTooLarge for an oversize event, or the underlying read error.
// Errors are sticky.
func (r *SSEReader) Next() (SSEEvent, error) {
	if r.err != nil {
		return SSEEvent{}, r.err
	}
	for {
		line, err := r.readLine()
		if err != nil {
			r.err = err
			return SSEEvent{}, err
		}
		if len(line) == 0 {
			if ev, ok := r.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		r.size += len(line)
		r.field(line)
	}
}

// dispatch ends the current event; ok is false when it has no data, which
// the spec says is not dispatched.
func (r *SSEReader) dispatch() (SSEEvent, bool) {
	defer func() {
		r.size = 0
		r.event = ""
		// Do not pin one huge event's buffer for the rest of the stream.
		if cap(r.data) > 64<<10 {
			r.data = nil
		} else {
			r.data = r.data[:0]
		}
	}()
	if len(r.data) == 0 {
		return SSEEvent{}, false
	}
	return SSEEvent{
		Event: r.event,
		Data:  string(r.data[:len(r.data)-1]),
		ID:    r.lastID,
	}, true
}

func (r *SSEReader) field(line []byte) {
	name, value, found := bytes.Cut(line, []byte{':'})
	if found {
		value = bytes.TrimPrefix(value, []byte{' '})
	}
	switch string(name) {
	case "event":
		r.event = eventName(value)
	case "data":
		r.data = append(r.data, value...)
		r.data = append(r.data, '\n')
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.lastID = string(value)
		}
	case "retry":
		if ms, ok := parseDigits(value); ok {
			r.retry = time.Duration(ms) * time.Millisecond
		}
	}
}

// parseDigits accepts ASCII digits only, as the spec's retry field does.
func parseDigits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// readLine returns the next non-comment line without its line end. The
// slice is valid until the next call.
func (r *SSEReader) readLine() ([]byte, error) {
	for {
		if r.r == r.w {
			if err := r.fill(); err != nil {
				// A line without its line end is incomplete and so is
				// any event it belongs to: both are dropped.
				return nil, err
			}
			continue
		}
		b := r.buf[r.r:r.w]
		if r.skipLF {
			r.skipLF = false
			if b[0] == '\n' {
				r.r++
				continue
			}
		}
		if !r.inLine {
			r.inLine = true
			r.comment = b[0] == ':'
		}
		i := indexEOL(b)
		if i < 0 {
			if !r.comment {
				if err := r.checkSize(len(b)); err != nil {
					return nil, err
				}
				r.line = append(r.line, b...)
			}
			r.r = r.w
			continue
		}
		r.skipLF = b[i] == '\r'
		r.r += i + 1
		r.inLine = false
		if r.comment {
			continue
		}
		seg := b[:i]
		if err := r.checkSize(len(seg)); err != nil {
			return nil, err
		}
		if len(r.line) > 0 {
			seg = append(r.line, seg...)
			// The caller is done with seg before the next append reuses it.
			r.line = seg[:0]
			if cap(r.line) > 64<<10 {
				r.line = nil
			}
		}
		return seg, nil
	}
}

func (r *SSEReader) checkSize(n int) error {
	if r.size+len(r.line)+n > r.max {
		return fmt.Errorf("%w: more than %d bytes", ErrEventTooLarge, r.max)
	}
	return nil
}

// indexEOL finds the first CR or LF. Two IndexByte calls beat IndexAny's
// byte loop, and the CR search is limited to before the first LF.
func indexEOL(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	head := b
	if lf >= 0 {
		head = b[:lf]
	}
	if cr := bytes.IndexByte(head, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

var bom = []byte("\xEF\xBB\xBF")

// fill reads more input into the empty buffer.
func (r *SSEReader) fill() error {
	if r.rerr != nil {
		return r.rerr
	}
	r.r, r.w = 0, 0
	for empty := 0; ; {
		n, err := r.src.Read(r.buf[r.w:])
		r.w += n
		if err != nil {
			r.rerr = err
		} else if n == 0 {
			if empty++; empty >= 100 {
				r.rerr = io.ErrNoProgress
			}
		}
		if !r.bomOK {
			// The BOM may arrive split across reads; every dispatching
			// stream is longer than three bytes, so waiting delays nothing.
			if r.w < len(bom) && r.rerr == nil {
				continue
			}
			r.bomOK = true
			if bytes.HasPrefix(r.buf[:r.w], bom) {
				r.r = len(bom)
			}
		}
		if r.r < r.w {
			return nil
		}
		if r.rerr != nil {
			return r.rerr
		}
	}
}

// WriteSSEEvent writes ev in canonical form: "event:" if Event is set, "id:"
// if ID is set, one "data:" line per line of Data, then a blank line. Event
// and ID must not contain CR or LF (nor ID a NUL), and Data must not contain
// CR, or the event could not be read back as written.
func WriteSSEEvent(w io.Writer, ev SSEEvent) error {
	if strings.ContainsAny(ev.Event, "\r\n") || strings.ContainsAny(ev.ID, "\r\n\x00") || strings.ContainsRune(ev.Data, '\r') {
		return errors.New("sse: event has a line break where none is allowed")
	}
	var b strings.Builder
	b.Grow(len(ev.Data) + len(ev.Event) + len(ev.ID) + 32)
	if ev.Event != "" {
		b.WriteString("event: " + ev.Event + "\n")
	}
	if ev.ID != "" {
		b.WriteString("id: " + ev.ID + "\n")
	}
	for line := range strings.SplitSeq(ev.Data, "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	return nil
}

// eventName is value as a string, without an allocation for the event
// types of the protocol (one per delta otherwise).
func eventName(value []byte) string {
	switch string(value) {
	case "delta":
		return "delta"
	case "state":
		return "state"
	case "done":
		return "done"
	case "error":
		return "error"
	case "input_required":
		return "input_required"
	}
	return string(value)
}
