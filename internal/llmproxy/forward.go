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
// written and flushed as soon as it is read, less what inspect cuts from it.
// The client gets the upstream's bytes whatever the call's outcome; only the
// recording says that a stream which ended cleanly had failed.
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
				if cut := c.inspect(buf[done : done+end]); cut.ok() {
					if !c.writeNoFlush(w, buf[written:done+cut.start]) {
						return false
					}
					written = done + cut.end
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
				cut := c.inspect(buf)
				if !cut.ok() {
					cut = span{len(buf), len(buf)}
				}
				if !c.writeNoFlush(w, buf[:cut.start]) || !c.write(w, rc, buf[cut.end:]) {
					return false
				}
			}
			// A clean end is no proof of a complete answer: a router or a
			// load balancer that loses its upstream may close its own
			// response cleanly.
			if !c.sawEnd && !c.sawUsageEnd {
				c.fail(c.status, OutcomeError, CodeUpstreamProtocol, c.unendedMessage())
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

// openAIError is the error object of the OpenAI wire format.
type openAIError struct {
	Code    any    `json:"code"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// callError is e as recorded: its code (a number spelled out), else its
// type, else fallback, and its message. It reports false when e has neither
// message nor code: not an error of this shape.
func (e *openAIError) callError(fallback string) (*CallError, bool) {
	if e.Message == "" && e.Code == nil {
		return nil, false
	}
	ce := &CallError{Code: fallback, Message: e.Message}
	switch code := e.Code.(type) {
	case string:
		if code != "" {
			ce.Code = code
			return ce, true
		}
	case float64:
		ce.Code = strconv.FormatFloat(code, 'f', -1, 64)
		return ce, true
	}
	if e.Type != "" {
		ce.Code = e.Type
	}
	return ce, true
}

// upstreamError summarises an upstream error body for the trace, without
// changing what the client gets.
func upstreamError(status int, body []byte) *CallError {
	var b struct {
		Error openAIError `json:"error"`
	}
	if json.Unmarshal(body, &b) == nil {
		if e, ok := b.Error.callError("upstream_status_" + strconv.Itoa(status)); ok {
			return e
		}
	}
	// Not the OpenAI error shape: the text may be anything, the prompt
	// echoed back included, and LLM bodies are never recorded (issue 14).
	// The client got it as it was; the trace says what it was, not what
	// it said.
	return &CallError{Code: "upstream_status_" + strconv.Itoa(status),
		Message: fmt.Sprintf("the upstream answered HTTP %d with a body of %d bytes that is not an OpenAI error (not recorded)", status, len(body))}
}

// streamError summarises the error object (or string) an upstream sent
// inside a stream, as upstreamError does a body.
func streamError(obj []byte) *CallError {
	var e openAIError
	if json.Unmarshal(obj, &e) == nil {
		if ce, ok := e.callError(CodeUpstreamStreamError); ok {
			return ce
		}
	}
	return notOpenAIStreamError(obj)
}

// notOpenAIStreamError records an error event that is not of the OpenAI
// shape by its size alone, for the reason upstreamError gives.
func notOpenAIStreamError(b []byte) *CallError {
	return &CallError{Code: CodeUpstreamStreamError,
		Message: fmt.Sprintf("the upstream reported an error in its stream, %d bytes that are not an OpenAI error (not recorded)", len(b))}
}
