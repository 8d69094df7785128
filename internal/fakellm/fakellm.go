// Package fakellm is a small OpenAI-compatible LLM server speaking the real
// wire format: Chat Completions (JSON and SSE, the usage chunk when
// stream_options.include_usage is set, tool calls when the request has
// tools), the Responses API (JSON and SSE), Embeddings and Models. Its
// answers are deterministic, derived from the request alone.
//
// # What it answers
//
//   - The last message is a tool result (role "tool", or a Responses
//     "function_call_output"): if the last user message has more clauses
//     (cut at ",", ";" and the word "then") than functions were called
//     since it, and a function the request offers that was not called since
//     then matches that message (the rule below, by keywords only, whatever
//     tool_choice says but "none"), a call of it — so one message can drive
//     several calls in a row, each tool once ("weather in Paris, then send
//     250 to Bob"), while a one-clause message ("refund order 1042") gets
//     one call however many tools it matches. Otherwise text: with
//     one tool result since the last user message, ToolReply of it; with
//     several, "Tool results:" and one line per result, "- <function>:
//     <result spelled out>".
//   - The request offers function tools and one is chosen (below): a call of
//     that one function — finish_reason "tool_calls", the arguments streamed
//     in small fragments as real models do.
//   - Otherwise: text, Reply of the last user message ("You said: …").
//
// # Which tool (function calling)
//
// The fake picks among the tools of the request by keyword matching, never
// by a tool's name alone. The last user message and each tool are cut into
// lower-case words (runs of letters and digits; camelCase split); words
// shorter than three letters, numbers and a short list of stop words ("the",
// "what", "please", "call" …) are dropped. A tool's words are those of its
// function name — only the part after the last "--" (an MCP server's tool),
// then after the last "." or "__", so "demo__weather" gives "weather" and
// "demo_mcp--lookup_order" "lookup_order" — and of its description. A message word
// matches a tool word when they are equal, or when one starts with the other
// and the shorter has four letters or more ("look" matches "lookup", "send"
// matches "sending"). A tool scores 2 for each distinct message word matching
// its name and 1 for each matching its description. The highest score wins;
// on a tie the tool whose first match comes earlier in the message, then the
// earlier tool in the request. No tool scoring above 0 means a text answer.
// tool_choice is honoured: "none" never calls, a named function is always
// called, "required" calls the first tool when none matched.
//
// # Which arguments
//
// The arguments follow the chosen tool's JSON Schema "properties", in their
// order (a schema without "properties" gets {"input": <message>}, see
// ToolArguments):
//
//   - enum: the first value the message names as a word;
//   - number or integer: the next number in the message ("1,000.50" reads
//     as 1000.5);
//   - string named input, query, q, message, text, prompt, question,
//     content, request, instruction(s) or task: the whole message — or, when
//     the message has several clauses (cut at ",", ";" and the word "then"),
//     the clause whose words match the tool best (the same scores as
//     below), without a leading "and", "also" or "then": a planner's
//     "weather in Paris, then send 250 to Bob" sends "send 250 to Bob" to
//     the tool about sending money;
//   - other strings: the phrase after the parameter's own name ("to Bob" for
//     "to", "city Paris" for "city"), else the phrase after the first unused
//     "in", "at", "for", "near", "from", "to" or "of" ("weather in New
//     York" → "New York"). A phrase is at most four words starting with a
//     letter and ends at punctuation, a digit or a word such as "today",
//     "please", "and" or a preposition.
//
// A parameter the message does not give takes the schema's "default"; a
// required one without a default takes the whole message (string), the
// first enum value, false, [] or {} — a required number is left out, so the
// call is refused as one with a real model's bad guess would be.
//
// It serves three masters: the LLM proxy's tests (faults can be scripted:
// error answers, a slow first byte, a stall or a dropped connection
// mid-stream, and it reports when a client went away), the proxy benchmark,
// and the binary's --demo mode, where it stands in for a real LLM.
package fakellm

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// Models are listed by /v1/models. Default: ["fake-gpt"].
	Models []string
	// APIKey, when set, is required as "Authorization: Bearer <APIKey>".
	APIKey string
	// ChunkDelay is the pause between two stream events.
	ChunkDelay time.Duration
	// Created is the Unix time stamped on responses; default 1700000000, so
	// answers are byte-for-byte reproducible.
	Created int64
	// Capture keeps each request's headers and body and the bytes of the
	// answer in Requests (the last MaxCaptured of them).
	Capture bool
	// OnClientGone is called, from the request's goroutine, when a client
	// goes away before its answer is complete.
	OnClientGone func(ClientGone)
}

// MaxCaptured is how many requests Server.Requests keeps.
const MaxCaptured = 256

// ClientGone describes a client that went away.
type ClientGone struct {
	Path string
	// At is when the server noticed.
	At time.Time
	// Events is how many SSE events had been written (0 for JSON answers).
	Events int
}

// Fault changes how the server answers one request (see Server.Push) or all
// of them (Server.SetDefault). Zero fields change nothing.
type Fault struct {
	// Status, when set, answers with this status and Body (default: an
	// OpenAI-style error object) instead of a completion.
	Status int
	Body   string
	Header http.Header
	// FirstByteDelay delays the response headers.
	FirstByteDelay time.Duration
	// BodyDelay delays the first body byte after the headers went out (a
	// stream that opens but is slow to start).
	BodyDelay time.Duration
	// ChunkDelay overrides Options.ChunkDelay.
	ChunkDelay time.Duration
	// StallAfter, when > 0, stops a stream after this many events and holds
	// the connection open, silent, until the client goes away.
	StallAfter int
	// DisconnectAfter, when > 0, drops the connection after this many
	// stream events (no terminating chunk: the client sees a broken stream).
	DisconnectAfter int
	// HoldOpen keeps a finished stream's response open, silent, until the
	// client leaves: an upstream that does not end its response after the
	// last event.
	HoldOpen bool
}

// Request is a request the server received (see Options.Capture).
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Status and Response are what the server answered: the exact bytes
	// of the body it wrote.
	Status   int
	Response []byte
	// Gone is set when the client went away before the answer was complete.
	Gone bool
}

// Server is the fake. It is an http.Handler; routes match on the path
// suffix, so it can be mounted under any prefix ("/v1/chat/completions",
// "/fake/v1/chat/completions").
type Server struct {
	opts Options

	mu       sync.Mutex
	queue    []Fault
	def      Fault
	captured []*Request

	seq      atomic.Int64
	requests atomic.Int64
	gone     atomic.Int64
}

// New returns a fake LLM server.
func New(opts Options) *Server {
	if len(opts.Models) == 0 {
		opts.Models = []string{"fake-gpt"}
	}
	if opts.Created == 0 {
		opts.Created = 1700000000
	}
	return &Server{opts: opts}
}

// Push queues faults: each request takes the next one, and once the queue is
// empty requests get the default (SetDefault).
func (s *Server) Push(faults ...Fault) {
	s.mu.Lock()
	s.queue = append(s.queue, faults...)
	s.mu.Unlock()
}

// SetDefault sets the fault applied when the queue is empty.
func (s *Server) SetDefault(f Fault) {
	s.mu.Lock()
	s.def = f
	s.mu.Unlock()
}

// Reset clears faults, captured requests and counters.
func (s *Server) Reset() {
	s.mu.Lock()
	s.queue, s.def, s.captured = nil, Fault{}, nil
	s.mu.Unlock()
	s.requests.Store(0)
	s.gone.Store(0)
}

// RequestCount is the number of requests served (any path).
func (s *Server) RequestCount() int64 { return s.requests.Load() }

// GoneCount is the number of clients that went away mid-answer.
func (s *Server) GoneCount() int64 { return s.gone.Load() }

// Requests returns the captured requests, oldest first. A request's
// Response is complete once its handler returned.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.captured))
	for i, r := range s.captured {
		out[i] = *r
	}
	return out
}

func (s *Server) nextFault() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		f := s.queue[0]
		s.queue = s.queue[1:]
		return f
	}
	return s.def
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	var body []byte
	if r.Body != nil {
		var b bytes.Buffer
		_, _ = b.ReadFrom(http.MaxBytesReader(w, r.Body, 64<<20))
		body = b.Bytes()
	}
	ex := &exchange{s: s, r: r, rw: w, body: body}
	if s.opts.Capture {
		ex.rec = &Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		s.mu.Lock()
		s.captured = append(s.captured, ex.rec)
		if len(s.captured) > MaxCaptured {
			s.captured = s.captured[len(s.captured)-MaxCaptured:]
		}
		s.mu.Unlock()
	}

	if s.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
		ex.error(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	ex.fault = s.nextFault()
	if !ex.sleep(ex.fault.FirstByteDelay) {
		return
	}
	if ex.fault.Status != 0 {
		ex.faultAnswer()
		return
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/chat/completions"):
		ex.chat()
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/responses"):
		ex.responses()
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/embeddings"):
		ex.embeddings()
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/models"):
		ex.models()
	default:
		ex.error(http.StatusNotFound, "invalid_request_error", "unknown_url", "Unknown request URL: "+r.Method+" "+path)
	}
}

// exchange is one request being answered.
type exchange struct {
	s     *Server
	r     *http.Request
	rw    http.ResponseWriter
	body  []byte
	fault Fault
	rec   *Request

	events   int
	complete bool
	goneOnce bool
}

func (ex *exchange) ctx() context.Context { return ex.r.Context() }

// clientGone notes (once) that the client left before the answer was done.
func (ex *exchange) clientGone() {
	if ex.goneOnce || ex.complete {
		return
	}
	ex.goneOnce = true
	ex.s.gone.Add(1)
	if ex.rec != nil {
		ex.s.mu.Lock()
		ex.rec.Gone = true
		ex.s.mu.Unlock()
	}
	if f := ex.s.opts.OnClientGone; f != nil {
		f(ClientGone{Path: ex.r.URL.Path, At: time.Now(), Events: ex.events})
	}
}

// sleep waits d unless the client leaves first; it reports whether to go on.
func (ex *exchange) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ex.ctx().Done():
		ex.clientGone()
		return false
	}
}

func (ex *exchange) header(status int, contentType string) {
	h := ex.rw.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Request-Id", "req_fake_"+itoa(ex.s.seq.Add(1)))
	h.Set("Openai-Processing-Ms", "1")
	if ex.rec != nil {
		ex.s.mu.Lock()
		ex.rec.Status = status
		ex.s.mu.Unlock()
	}
}

// writeJSON sends a complete JSON answer.
func (ex *exchange) writeJSON(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		ex.error(http.StatusInternalServerError, "server_error", "", err.Error())
		return
	}
	ex.writeRaw(status, "application/json", b)
}

func (ex *exchange) writeRaw(status int, contentType string, b []byte) {
	ex.header(status, contentType)
	ex.rw.Header().Set("Content-Length", itoa(int64(len(b))))
	ex.rw.WriteHeader(status)
	if ex.fault.BodyDelay > 0 {
		_ = http.NewResponseController(ex.rw).Flush()
		if !ex.sleep(ex.fault.BodyDelay) {
			return
		}
	}
	if ex.rec != nil {
		ex.s.mu.Lock()
		ex.rec.Response = append(ex.rec.Response, b...)
		ex.s.mu.Unlock()
	}
	if _, err := ex.rw.Write(b); err != nil {
		ex.clientGone()
		return
	}
	ex.complete = true
}

func (ex *exchange) error(status int, typ, code, msg string) {
	var c any
	if code != "" {
		c = code
	}
	ex.writeJSON(status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}

func (ex *exchange) faultAnswer() {
	for k, vv := range ex.fault.Header {
		ex.rw.Header()[k] = vv
	}
	if ex.fault.Body != "" {
		ex.writeRaw(ex.fault.Status, "application/json", []byte(ex.fault.Body))
		return
	}
	typ := "server_error"
	if ex.fault.Status < 500 {
		typ = "invalid_request_error"
	}
	if ex.fault.Status == http.StatusTooManyRequests {
		typ = "rate_limit_exceeded"
	}
	ex.error(ex.fault.Status, typ, "", "fake upstream error "+itoa(int64(ex.fault.Status)))
}

// stream writes SSE events; it returns false once the stream must stop
// (client gone, or a scripted stall or disconnect).
type stream struct {
	ex    *exchange
	rc    *http.ResponseController
	delay time.Duration
}

func (ex *exchange) startStream() *stream {
	ex.header(http.StatusOK, "text/event-stream; charset=utf-8")
	h := ex.rw.Header()
	h.Set("Cache-Control", "no-cache")
	ex.rw.WriteHeader(http.StatusOK)
	st := &stream{ex: ex, rc: http.NewResponseController(ex.rw), delay: ex.s.opts.ChunkDelay}
	if ex.fault.ChunkDelay > 0 {
		st.delay = ex.fault.ChunkDelay
	}
	if err := st.rc.Flush(); err != nil {
		ex.clientGone()
		return nil
	}
	if !ex.sleep(ex.fault.BodyDelay) {
		return nil
	}
	return st
}

// event sends one SSE event: "event: name" (when name is set) and "data: …".
func (st *stream) event(name string, data []byte) bool {
	ex := st.ex
	if ex.events > 0 && !ex.sleep(st.delay) {
		return false
	}
	if n := ex.fault.StallAfter; n > 0 && ex.events >= n {
		<-ex.ctx().Done()
		ex.clientGone()
		return false
	}
	if n := ex.fault.DisconnectAfter; n > 0 && ex.events >= n {
		// Drop the connection without the terminating chunk.
		panic(http.ErrAbortHandler)
	}
	var b bytes.Buffer
	b.Grow(len(data) + len(name) + 16)
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(name)
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	if ex.rec != nil {
		ex.s.mu.Lock()
		ex.rec.Response = append(ex.rec.Response, b.Bytes()...)
		ex.s.mu.Unlock()
	}
	if _, err := ex.rw.Write(b.Bytes()); err != nil {
		ex.clientGone()
		return false
	}
	if err := st.rc.Flush(); err != nil {
		ex.clientGone()
		return false
	}
	ex.events++
	return true
}

func (st *stream) json(name string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own types: cannot happen
	}
	return st.event(name, b)
}

func (st *stream) finish() {
	st.ex.complete = true
	if st.ex.fault.HoldOpen {
		<-st.ex.ctx().Done()
	}
}

func (ex *exchange) models() {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	data := make([]model, 0, len(ex.s.opts.Models))
	for _, m := range ex.s.opts.Models {
		data = append(data, model{ID: m, Object: "model", Created: ex.s.opts.Created, OwnedBy: "fakellm"})
	}
	ex.writeJSON(http.StatusOK, map[string]any{"object": "list", "data": data})
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
