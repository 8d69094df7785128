package mcpclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/jsonstr"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// A tools/call to a Streamable HTTP server is one POST made here, on the
// go-sdk session's HTTP client, instead of cs.CallTool (issue 12's
// benchmark: an MCP call should add no more than a native server tool).
// Through the SDK the answer crossed three goroutines — the transport's
// stream reader, the session's read loop, the caller — where a native
// POST's crosses one, and every message was decoded with a fresh 32 KB
// buffer: together about 0.15–0.2 ms per call at p50 on the benchmark's
// 2-vCPU machine. Here the caller's goroutine sends the request and reads
// the answer itself, from a pooled buffer.
//
// The session itself (initialize, the standalone stream, pings, tools/list,
// reconnects) stays the SDK's: a call only borrows its session id,
// negotiated protocol version and HTTP client (the same connection pool,
// SSRF-guarded dialer and spec headers). stdio servers, and sessions on a
// protocol version that wants per-request _meta (2026-07-28 on, which this
// client does not offer), keep cs.CallTool.

const (
	// callIDPrefix starts the JSON-RPC id of every request sent here: the
	// SDK numbers the session's own requests, so a string id never
	// collides with one of them.
	callIDPrefix = "ap-"
	// maxMessage bounds one message read from a server (an SSE event's
	// data, or an application/json answer): the SDK's own default.
	maxMessage = mcp.DefaultMaxEventSize
	// drainLimit bounds what is read after the answer to keep the
	// connection reusable; a server that sends more loses the connection.
	drainLimit = 1 << 20
	// notifyTimeout bounds the POST of a notifications/cancelled or of an
	// answer to a server's request, as the SDK bounds its cancellation.
	notifyTimeout = 5 * time.Second
	// firstV2Protocol is the first protocol version whose requests carry
	// _meta the SDK fills in (SEP-2575); calls on such sessions go through
	// the SDK.
	firstV2Protocol = "2026-07-28"
)

// httpSession is what a direct tools/call needs of a live session.
type httpSession struct {
	cs      *mcp.ClientSession
	hc      *http.Client // conn.direct: the session's pool, without headerTransport
	url     string
	id      string            // Mcp-Session-Id; "" for a server without sessions
	version string            // the negotiated protocol version
	headers map[string]string // the spec's headers, which headerTransport adds to the SDK's requests
}

// directSession is the session's HTTP side when a tools/call may be made
// directly on it, or false (stdio, or a protocol version that wants the
// SDK's per-request additions).
func (c *conn) directSession(cs *mcp.ClientSession, hc *http.Client) (httpSession, bool) {
	if hc == nil {
		return httpSession{}, false
	}
	res := cs.InitializeResult()
	if res == nil || res.ProtocolVersion == "" || res.ProtocolVersion >= firstV2Protocol {
		return httpSession{}, false
	}
	return httpSession{cs: cs, hc: hc, url: c.spec.URL, id: cs.ID(), version: res.ProtocolVersion, headers: c.spec.Headers}, true
}

// newRequest is a POST of body on the session, with the headers every
// message on it carries: the protocol's, the spec's and ctx's trace
// context (what headerTransport adds to the SDK's requests, set here on a
// request of our own rather than on a clone of it).
func (s httpSession) newRequest(ctx context.Context, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Mcp-Protocol-Version"] = []string{s.version}
	if s.id != "" {
		h["Mcp-Session-Id"] = []string{s.id}
	}
	setHeaders(ctx, h, s.headers)
	return req, nil
}

// callAnswer is the part of a tools/call result the platform keeps, as it
// came on the wire.
type callAnswer struct {
	Content           json.RawMessage `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

// wireMessage is any JSON-RPC message a server sends.
type wireMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result *callAnswer     `json:"result"`
	Error  *wireError      `json:"error"`
}

type wireError = toolsvc.MCPRPCError

// callHTTP sends one tools/call as a POST on the session and reads its
// answer from the response: application/json, or an event stream that may
// carry the call's progress (handed to onProgress) and other messages
// before it. The outcomes are CallMCP's (see callError for the SDK path).
func (c *conn) callHTTP(ctx context.Context, s httpSession, tool string, args json.RawMessage, token string, onProgress func(float64, float64, string)) (*toolsvc.MCPResult, error) {
	id := callIDPrefix + strconv.FormatUint(c.m.callSeq.Add(1), 10)
	body := appendCall(make([]byte, 0, 112+len(tool)+len(args)+len(token)), id, tool, args, token)

	// The request runs under a context of its own, ended at once when ctx
	// ends before the answer, and only once the rest of the response has
	// been read after it (see drain; callTool explains why).
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	req, err := s.newRequest(reqCtx, body)
	if err != nil {
		stop()
		cancel()
		return nil, fmt.Errorf("%w: MCP server %s: %v", toolsvc.ErrMCPUnreachable, c.row.Name, err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		stop()
		cancel()
		if ctx.Err() != nil {
			c.sendCancelled(ctx, s, id)
			return nil, ctx.Err()
		}
		var ee *agent.EndpointError
		if errors.As(err, &ee) || errors.Is(err, syscall.ECONNREFUSED) {
			// Nothing was sent. The session cannot be used any more either.
			go s.cs.Close()
			return nil, fmt.Errorf("%w: MCP server %s: %v", toolsvc.ErrMCPUnreachable, c.row.Name, err)
		}
		return nil, fmt.Errorf("%w: MCP server %s: %v", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, err)
	}
	ans, err := c.readAnswer(ctx, s, resp, id, token, onProgress)
	if err != nil {
		stop()
		cancel()
		resp.Body.Close()
		if ctx.Err() != nil {
			c.sendCancelled(ctx, s, id)
			return nil, ctx.Err()
		}
		return nil, err
	}
	// Answered: ctx ending from now on does not cut the read of the rest.
	stop()
	drain(resp.Body, cancel)

	out := &toolsvc.MCPResult{IsError: ans.IsError, Content: ans.Content, StructuredContent: ans.StructuredContent}
	if isNull(out.Content) {
		out.Content = json.RawMessage(`[]`)
	}
	if isNull(out.StructuredContent) {
		out.StructuredContent = nil
	}
	return out, nil
}

// readAnswer reads the response to the tools/call with id, up to its
// answer.
func (c *conn) readAnswer(ctx context.Context, s httpSession, resp *http.Response, id, token string, onProgress func(float64, float64, string)) (*callAnswer, error) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, c.statusError(s, resp)
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	switch ct {
	case "application/json":
		var msg wireMessage
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxMessage)).Decode(&msg); err != nil {
			return nil, fmt.Errorf("%w: MCP server %s: reading the answer: %v", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, err)
		}
		if !sameID(msg.ID, id) || msg.Method != "" {
			return nil, fmt.Errorf("%w: MCP server %s: the answer is not the call's", toolsvc.ErrMCPOutcomeUnknown, c.row.Name)
		}
		return c.answer(&msg)
	case "text/event-stream":
		return c.readStream(ctx, s, resp.Body, id, token, onProgress)
	}
	return nil, fmt.Errorf("%w: MCP server %s: answered with content type %q", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, ct)
}

// answer is the outcome the call's own response says.
func (c *conn) answer(msg *wireMessage) (*callAnswer, error) {
	switch {
	case msg.Error != nil:
		// The server's answer: the tool's own failure (an unknown tool on
		// servers that say so with an error instead of isError).
		return nil, msg.Error
	case msg.Result == nil:
		return nil, fmt.Errorf("%w: MCP server %s: an answer with neither result nor error", toolsvc.ErrMCPOutcomeUnknown, c.row.Name)
	}
	return msg.Result, nil
}

// statusError says what an HTTP error status answering a tools/call means,
// as the SDK's transport does: a JSON-RPC error in the body is the
// server's answer; a 404 on a session id means the server no longer has
// the session (and did not run the call), which is closed so that this
// conn makes a new one; the transient statuses leave the session alone;
// any other status breaks it.
func (c *conn) statusError(s httpSession, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var msg wireMessage
	if json.Unmarshal(b, &msg) == nil && msg.Error != nil {
		return msg.Error
	}
	err := fmt.Errorf("%w: MCP server %s answered the call %s", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, resp.Status)
	switch resp.StatusCode {
	case http.StatusNotFound:
		go s.cs.Close()
		if s.id != "" {
			// The spec's answer to a request on a session the server has
			// ended: the request was refused, not run — unreachable, not an
			// unknown outcome (found by an external audit).
			return fmt.Errorf("%w: MCP server %s no longer knows session %s (404: the call was refused, not run); reconnecting", toolsvc.ErrMCPUnreachable, c.row.Name, s.id)
		}
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
	default:
		go s.cs.Close()
	}
	return err
}

// readStream reads the call's event stream until its answer: progress for
// the call goes to onProgress, and other messages are handled as the SDK
// session would (handleServerMessage).
func (c *conn) readStream(ctx context.Context, s httpSession, body io.Reader, id, token string, onProgress func(float64, float64, string)) (*callAnswer, error) {
	r := newEventReader(body)
	defer r.release()
	for {
		data, err := r.next()
		if err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("%w: MCP server %s ended the call's stream without its answer", toolsvc.ErrMCPOutcomeUnknown, c.row.Name)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: MCP server %s: reading the answer: %v", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, err)
		}
		var msg wireMessage
		if err := json.Unmarshal(data, &msg); err != nil {
			// The SDK fails the session on a malformed event.
			go s.cs.Close()
			return nil, fmt.Errorf("%w: MCP server %s: a malformed message on the call's stream: %v", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, err)
		}
		if msg.Method == "" {
			if sameID(msg.ID, id) {
				return c.answer(&msg)
			}
			continue // an answer to nothing sent on this stream
		}
		if msg.Method == "notifications/progress" && token != "" && onProgress != nil {
			var p progressParams
			if json.Unmarshal(msg.Params, &p) == nil && fmt.Sprint(p.ProgressToken) == token {
				onProgress(p.Progress, p.Total, p.Message)
				continue
			}
		}
		c.handleServerMessage(ctx, s, &msg)
	}
}

type progressParams struct {
	ProgressToken any     `json:"progressToken"`
	Progress      float64 `json:"progress"`
	Total         float64 `json:"total"`
	Message       string  `json:"message"`
}

// handleServerMessage handles a message other than the call's own answer
// and progress that a server sends on a call's stream. The go-sdk session
// cannot be handed a message from outside, so what its handlers in
// connect do is done here: other calls' progress, log messages and
// list_changed notifications are dispatched like theirs; a request (rare
// on a call's stream: a ping, or roots/list) is answered as the SDK client
// with this configuration answers it — an empty result for ping, no roots
// for roots/list, "method not found" for anything else (this client
// offers neither sampling nor elicitation). Other notifications are
// dropped, as the SDK drops those it has no handler for.
func (c *conn) handleServerMessage(ctx context.Context, s httpSession, msg *wireMessage) {
	if len(msg.ID) > 0 && string(msg.ID) != "null" {
		var answer string
		switch msg.Method {
		case "ping":
			answer = `"result":{}`
		case "roots/list":
			answer = `"result":{"roots":[]}`
		default:
			m, _ := json.Marshal("method not found: " + msg.Method)
			answer = `"error":{"code":-32601,"message":` + string(m) + `}`
		}
		body := []byte(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,` + answer + `}`)
		go c.post(ctx, s, body)
		return
	}
	switch msg.Method {
	case "notifications/progress":
		var p progressParams
		if json.Unmarshal(msg.Params, &p) == nil {
			c.notifyProgress(fmt.Sprint(p.ProgressToken), p.Progress, p.Total, p.Message)
		}
	case "notifications/tools/list_changed":
		c.toolsChanged()
	case "notifications/message":
		var p struct {
			Level  string          `json:"level"`
			Logger string          `json:"logger"`
			Data   json.RawMessage `json:"data"`
		}
		if json.Unmarshal(msg.Params, &p) == nil {
			c.log.Debug("MCP server log message", "level", p.Level, "logger", p.Logger, "data", p.Data)
		}
	}
}

// sendCancelled tells the server that the call with id is abandoned, as
// the SDK does when a call's context ends: best effort, off the caller's
// path.
func (c *conn) sendCancelled(ctx context.Context, s httpSession, id string) {
	reason, _ := json.Marshal(ctx.Err().Error())
	body := []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"` + id + `","reason":` + string(reason) + `}}`)
	go c.post(ctx, s, body)
}

// post sends one notification or answer on the session (the server
// answers 202, with no body).
func (c *conn) post(ctx context.Context, s httpSession, body []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	defer cancel()
	req, err := s.newRequest(ctx, body)
	if err != nil {
		return
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		c.log.Debug("MCP server: sending a message failed", "err", err)
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	resp.Body.Close()
}

// drain reads what follows the answer (the end of the stream) and closes
// the body, so that the connection goes back to the pool; it runs after
// the call returned, as the SDK's stream reader did, and gives up
// answeredGrace later, for a server that does not end its stream.
func drain(body io.ReadCloser, cancel context.CancelFunc) {
	go func() {
		t := time.AfterFunc(answeredGrace, cancel)
		io.CopyN(io.Discard, body, drainLimit)
		body.Close()
		t.Stop()
		cancel()
	}()
}

// appendCall appends the tools/call request to b. args is the call's
// arguments, a JSON object already checked against the tool's schema.
func appendCall(b []byte, id, tool string, args json.RawMessage, token string) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":"`...)
	b = append(b, id...)
	b = append(b, `","method":"tools/call","params":{"name":`...)
	b = jsonstr.Append(b, tool)
	b = append(b, `,"arguments":`...)
	b = append(b, args...)
	if token != "" {
		b = append(b, `,"_meta":{"progressToken":`...)
		b = jsonstr.Append(b, token)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}

// sameID reports whether raw, a JSON-RPC id, is the string id.
func sameID(raw json.RawMessage, id string) bool {
	if len(raw) == len(id)+2 && raw[0] == '"' && string(raw[1:len(raw)-1]) == id {
		return true
	}
	var s string
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil && s == id
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// eventReader reads the data of a server-sent event stream's message
// events (the only kind MCP sends), from a pooled buffer.
type eventReader struct {
	br   *bufio.Reader
	data []byte // the event being read
	line []byte // a line longer than br's buffer
}

var eventReaders = sync.Pool{New: func() any { return &eventReader{br: bufio.NewReaderSize(nil, 4096)} }}

func newEventReader(r io.Reader) *eventReader {
	er := eventReaders.Get().(*eventReader)
	er.br.Reset(r)
	return er
}

// release returns the reader to the pool; what next returned is invalid
// from then on.
func (r *eventReader) release() {
	r.br.Reset(nil)
	if cap(r.data) > 64<<10 {
		r.data = nil
	}
	if cap(r.line) > 64<<10 {
		r.line = nil
	}
	r.data, r.line = r.data[:0], r.line[:0]
	eventReaders.Put(r)
}

// next returns the data of the next message event, valid until the next
// call; io.EOF at the end of the stream.
func (r *eventReader) next() ([]byte, error) {
	r.data = r.data[:0]
	hasData, message := false, true
	for {
		line, err := r.readLine()
		// An event without data is not dispatched (the SSE specification);
		// MCP servers send such events to prime a stream with an id
		// (SEP-1699).
		if err != nil {
			if err == io.EOF && len(r.data) > 0 && message {
				// A last event without its blank line.
				return r.data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if len(r.data) > 0 && message {
				return r.data, nil
			}
			r.data, hasData, message = r.data[:0], false, true
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if hasData {
				r.data = append(r.data, '\n')
			}
			if len(r.data)+len(value) > maxMessage {
				return nil, fmt.Errorf("an event larger than %d bytes", maxMessage)
			}
			r.data = append(r.data, value...)
			hasData = true
		case "event":
			message = len(value) == 0 || string(value) == "message"
		}
		// id, retry and comments (an empty field) are of no use here: the
		// stream of a call is not resumed (neither is it by the SDK with
		// this conn's MaxRetries), and its end without the answer is the
		// call's outcome unknown.
	}
}

// readLine returns the next line without its end (\n or \r\n), valid
// until the next call.
func (r *eventReader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.line = append(r.line[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(r.line) > maxMessage {
				return nil, fmt.Errorf("a line longer than %d bytes", maxMessage)
			}
			line, err = r.br.ReadSlice('\n')
			r.line = append(r.line, line...)
		}
		line = r.line
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = nil // a last line without its end
		} else {
			return nil, err
		}
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'}), nil
}
