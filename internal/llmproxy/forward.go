package llmproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Response headers that describe one connection, not the message.
var hopHeaders = map[string]bool{
	"Connection":         true,
	"Keep-Alive":         true,
	"Proxy-Connection":   true,
	"Proxy-Authenticate": true,
	"Te":                 true,
	"Trailer":            true,
	"Transfer-Encoding":  true,
	"Upgrade":            true,
	"Content-Length":     true, // set by us: a stream may lose its usage chunk
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		if !hopHeaders[k] {
			dst[k] = vv
		}
	}
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	// The spellings upstreams send, without the parser and its map (its
	// two allocations, on every call).
	if rest, ok := strings.CutPrefix(ct, "text/event-stream"); ok && (rest == "" || rest[0] == ';') {
		return true
	}
	if ct == "" || strings.HasPrefix(ct, "application/json") {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// forward sends the upstream response to the client. It reports whether the
// response must be aborted (it failed after the headers were sent).
func (c *call) forward(w http.ResponseWriter, resp *http.Response) bool {
	defer resp.Body.Close()
	c.status = resp.StatusCode
	if resp.StatusCode < 300 && isEventStream(resp.Header) {
		return c.forwardStream(w, resp)
	}
	c.forwardBuffered(w, resp)
	return false
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBuffer keeps rare huge bodies from pinning memory in the pool.
const maxPooledBuffer = 1 << 20

// forwardBuffered reads a whole non-streaming answer, then sends it. Reading
// it first costs nothing a client could use (a JSON body is useless until
// complete) and means a timeout or a broken upstream is still answered with
// a clean 504/502 rather than a truncated 200.
func (c *call) forwardBuffered(w http.ResponseWriter, resp *http.Response) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBuffer {
			bufPool.Put(buf)
		}
	}()
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	_, err := buf.ReadFrom(touchReader{resp.Body, c})
	c.stopDog()
	if err != nil {
		if c.ctx.Err() != nil {
			c.failCtx()
		} else {
			c.fail(http.StatusBadGateway, OutcomeError, CodeUpstreamProtocol, "reading upstream response: "+err.Error())
		}
		c.answerError(w)
		return
	}
	body := buf.Bytes()
	h := w.Header()
	copyHeader(h, resp.Header)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	c.wroteHead = true
	if _, err := w.Write(body); err != nil {
		c.fail(resp.StatusCode, OutcomeCancelled, CodeClientCancelled, errClientGone.Error())
	} else {
		// Let the client have its answer before we meter it.
		_ = http.NewResponseController(w).Flush()
	}
	if resp.StatusCode >= 300 {
		c.noUsage = true
		if c.outcome == "" {
			c.outcome = OutcomeError
			c.err = upstreamError(resp.StatusCode, body)
		}
		return
	}
	if u := findMember(body, "usage"); u.ok() && body[u.start] == '{' {
		c.usage, c.haveUsage = parseUsage(body[u.start:u.end])
	}
}

// touchReader feeds the call's watchdog on every read that returns data.
type touchReader struct {
	r io.Reader
	c *call
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.c.touch()
	}
	return n, err
}

// SSE read buffers, pooled: one per stream in flight, so small (a chunk
// is a few hundred bytes); one grows when a single event does not fit.
const (
	sseBufSize  = 8 << 10
	maxSSEEvent = 4 << 20 // a bigger event is passed through unparsed
)

var ssePool = sync.Pool{New: func() any { b := make([]byte, sseBufSize); return &b }}

// forwardStream relays an SSE stream event by event: every complete event is
// written and flushed as soon as it is read. Each event costs one substring
// search for "usage"; only the usage object is decoded.
func (c *call) forwardStream(w http.ResponseWriter, resp *http.Response) bool {
	h := w.Header()
	copyHeader(h, resp.Header)
	// Tell nginx and friends not to buffer the stream.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(resp.StatusCode)
	c.wroteHead = true
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		c.fail(resp.StatusCode, OutcomeCancelled, CodeClientCancelled, errClientGone.Error())
		return false
	}

	bp := ssePool.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= maxPooledBuffer {
			*bp = buf[:0]
			ssePool.Put(bp)
		}
	}()
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= maxSSEEvent {
				// One giant event: pass what we have through unparsed.
				if !c.write(w, rc, buf) {
					return false
				}
				buf = buf[:0]
			} else {
				nb := make([]byte, len(buf), 2*cap(buf))
				copy(nb, buf)
				buf = nb
			}
		}
		n, rerr := resp.Body.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			c.touch()
			buf = buf[:len(buf)+n]
			done := 0    // bytes of buf consumed as complete events
			written := 0 // bytes of buf already sent
			for {
				end := eventEnd(buf[done:])
				if end < 0 {
					break
				}
				if c.inspect(buf[done : done+end]) {
					if !c.writeNoFlush(w, buf[written:done]) {
						return false
					}
					written = done + end
				}
				done += end
				c.chunks++
			}
			if done > written && !c.writeNoFlush(w, buf[written:done]) {
				return false
			}
			if done > 0 {
				if err := rc.Flush(); err != nil {
					c.fail(c.status, OutcomeCancelled, CodeClientCancelled, errClientGone.Error())
					return false
				}
				// The client has the last event: whatever happens to either
				// connection now (an SDK closes its side on [DONE]), the
				// call is complete.
				c.complete = c.sawEnd
			}
			buf = buf[:copy(buf, buf[done:])]
		}
		if rerr == io.EOF {
			c.stopDog()
			if len(buf) > 0 {
				// A last event without its blank line: still the upstream's bytes.
				c.inspect(buf)
				c.write(w, rc, buf)
			}
			return false
		}
		if rerr != nil {
			c.stopDog()
			if c.ctx.Err() != nil {
				c.failCtx()
			} else {
				c.fail(c.status, OutcomeError, CodeUpstreamProtocol, "upstream stream broke: "+rerr.Error())
			}
			return !c.complete && c.outcome != OutcomeCancelled
		}
	}
}

func (c *call) writeNoFlush(w http.ResponseWriter, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	if _, err := w.Write(b); err != nil {
		c.fail(c.status, OutcomeCancelled, CodeClientCancelled, errClientGone.Error())
		return false
	}
	return true
}

func (c *call) write(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	if !c.writeNoFlush(w, b) {
		return false
	}
	if err := rc.Flush(); err != nil {
		c.fail(c.status, OutcomeCancelled, CodeClientCancelled, errClientGone.Error())
		return false
	}
	return true
}

var doneMarker = []byte("[DONE]")

// inspect meters one SSE event and reports whether to drop it (the usage
// chunk we asked for on the client's behalf). It also notes the stream's
// last event: "data: [DONE]" for chat, the usage-carrying
// response.completed (or .incomplete/.failed) for the Responses API.
func (c *call) inspect(ev []byte) bool {
	if !c.ep.chat {
		// The Responses API: only its terminal event ends the stream and
		// carries the call's usage. Another event may hold a "usage" key
		// too — a tool's parameter schema echoed in response.created —
		// which must not pass for the end of a stream cut after it.
		if !responsesTerminal(ev) {
			return false
		}
		c.sawEnd = true
	}
	u := findUsageObject(ev)
	if !u.ok() {
		if c.ep.chat && len(ev) <= 32 && bytes.Contains(ev, doneMarker) {
			c.sawEnd = true
		}
		return false
	}
	if us, ok := parseUsage(ev[u.start:u.end]); ok {
		c.usage, c.haveUsage = us, true
	}
	return c.strip && hasEmptyChoices(ev)
}

// responsesTerminal reports whether an SSE event of the Responses API is
// the stream's last: response.completed, .incomplete or .failed, named by
// its "event:" line or, where an upstream sends none, by the "type" its
// data starts with.
func responsesTerminal(ev []byte) bool {
	typ := sseEventName(ev)
	if typ == nil {
		typ = leadingType(ev)
	}
	switch string(typ) {
	case "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
}

var (
	eventPrefix = []byte("event:")
	dataPrefix  = []byte("data:")
	typePrefix  = []byte(`{"type":"`)
)

// sseEventName is the value of ev's "event:" line, or nil.
func sseEventName(ev []byte) []byte {
	for line := range bytes.Lines(ev) {
		if v, ok := bytes.CutPrefix(line, eventPrefix); ok {
			return bytes.TrimSpace(v)
		}
	}
	return nil
}

// leadingType is the "type" value a data line's JSON object starts with
// (the OpenAI wire format writes it first), or nil.
func leadingType(ev []byte) []byte {
	for line := range bytes.Lines(ev) {
		v, ok := bytes.CutPrefix(line, dataPrefix)
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		if !bytes.HasPrefix(v, typePrefix) {
			return nil
		}
		v = v[len(typePrefix):]
		if i := bytes.IndexByte(v, '"'); i >= 0 {
			return v[:i]
		}
		return nil
	}
	return nil
}

// eventEnd returns the length of the first complete SSE event in b
// (through its terminating blank line), or -1.
func eventEnd(b []byte) int {
	for off := 0; ; {
		k := bytes.IndexByte(b[off:], '\n')
		if k < 0 {
			return -1
		}
		i := off + k + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
		off = i
	}
}

// upstreamError summarises an upstream error body for the trace, without
// changing what the client gets.
func upstreamError(status int, body []byte) *CallError {
	e := &CallError{Code: "upstream_status_" + strconv.Itoa(status)}
	var b struct {
		Error struct {
			Code    any    `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) == nil && (b.Error.Message != "" || b.Error.Code != nil) {
		e.Message = b.Error.Message
		switch code := b.Error.Code.(type) {
		case string:
			if code != "" {
				e.Code = code
			}
		case float64:
			e.Code = strconv.FormatFloat(code, 'f', -1, 64)
		default:
			if b.Error.Type != "" {
				e.Code = b.Error.Type
			}
		}
		return e
	}
	// Not the OpenAI error shape: the text may be anything, the prompt
	// echoed back included, and LLM bodies are never recorded (issue 14).
	// The client got it as it was; the trace says what it was, not what
	// it said.
	e.Message = fmt.Sprintf("the upstream answered HTTP %d with a body of %d bytes that is not an OpenAI error (not recorded)", status, len(body))
	return e
}
