package agentplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Agent calls (DESIGN §11): an agent asks the platform to run another agent
// as a child run of its own run, in the same session, and follows the child
// over server-sent events:
//
//	call, err := req.Client().Agents().Invoke(ctx, "weather", "What's the weather in Paris?")
//	if err != nil { … }                 // a refusal: *SubAgentError (agent_not_linked …)
//	defer call.Close()
//	for {
//		ev, err := call.Next()
//		if errors.Is(err, io.EOF) { break }
//		if err != nil { … }
//		if ev.Type == "delta" { s.Delta(ev.Text) }
//	}
//	res, err := call.Result()           // *SubAgentError when the child failed
//
// The tool form needs nothing new: Tools().Invoke(ctx, "call_weather",
// map[string]any{"message": "…"}) is an ordinary tool call.

// Timing of agent calls.
const (
	// AgentReadTimeout is how long a child's stream may stay silent before
	// it is taken for dead and attached again; the platform sends a
	// keep-alive comment every 15 s.
	AgentReadTimeout = 45 * time.Second
	// AgentMaxAttempts bounds how often the call is sent in a row without an
	// event coming back (connection errors, 502/503/504, a stream cut short).
	// A 429 rate_limited is not counted: the call is sent again once the
	// wait the platform named is over, for as long as ctx allows.
	AgentMaxAttempts = 5
)

// AgentEvent is one event of a child run as its caller gets it: Type is
// run_started, delta, state, tool_request, approval_required (notices: the
// session's user answers them), done, error or input_required (the child
// asked back, DESIGN §12). Data is the whole event as
// the platform sent it (session_id, seq, event_id, ts, run_id,
// parent_run_id and the event's fields).
type AgentEvent struct {
	Type        string
	RunID       string
	ParentRunID string
	Seq         int64
	// Text is a delta's text ("" for other events).
	Text string
	Data json.RawMessage
}

// AgentResult is how a child run ended: the direct form's answer
// (POST /v1/agents/{agent_id}:invoke).
type AgentResult struct {
	RunID string `json:"run_id"`
	// Status is DONE, FAILED, CANCELLED or INPUT_REQUIRED.
	Status string `json:"status"`
	// Output is the child's whole answer when Status is DONE.
	Output string `json:"output"`
	// Usage is what the child's agent reported with done ({} otherwise).
	Usage json.RawMessage `json:"usage"`
	// TotalUsage sums the child's subtree: prompt_tokens,
	// completion_tokens, total_tokens, cached_tokens, reasoning_tokens,
	// estimated_cost, llm_calls, tool_calls.
	TotalUsage json.RawMessage `json:"total_usage"`
	// Error says why when Status is FAILED or CANCELLED.
	Error *ToolCallError `json:"error,omitempty"`
	// Question and Detail are what the child asked when Status is
	// INPUT_REQUIRED: not a failure. The caller decides whether to ask
	// the user (returning the *InputRequiredError that Text gives does);
	// its next call of that agent in the same intention answers it.
	Question string          `json:"question,omitempty"`
	Detail   json.RawMessage `json:"detail,omitempty"`
}

// SubAgentError is a child run that failed or was cancelled, or an agent
// call the platform refused:
//
//   - the child ended badly: Code is the child's error code (its agent's
//     own code, "cancelled", "parent_ended", "platform_restarted" …),
//     RunStatus is FAILED or CANCELLED, Status is 0 and Result holds the
//     whole result;
//   - refused (a 4xx answer): the answer's code — "agent_not_linked",
//     "agent_not_found", "max_depth_exceeded", "run_not_active",
//     "idempotency_conflict" …; Status is the HTTP status and errors.As also
//     finds the *APIError. A 429 rate_limited is no refusal: it is waited
//     out, and one ctx leaves no time for is a bare *APIError.
//
// A handler that returns it (wrapped or not) ends its run with Code.
type SubAgentError struct {
	AgentID   string
	RunID     string
	RunStatus string
	Code      string
	Message   string
	Status    int
	Result    *AgentResult

	api *APIError
}

func (e *SubAgentError) Error() string {
	msg := fmt.Sprintf("agentplane: agent %s failed (%s)", e.AgentID, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.RunID != "" {
		msg += " [run " + e.RunID + "]"
	}
	return msg
}

// Unwrap gives the *APIError of a refusal.
func (e *SubAgentError) Unwrap() error {
	if e.api == nil {
		return nil
	}
	return e.api
}

// AgentOption tunes one agent call.
type AgentOption func(*agentOptions)

type agentOptions struct {
	idempotencyKey string
	readTimeout    time.Duration
	retryBase      time.Duration
}

// WithAgentIdempotencyKey sets the call's idempotency key: the same key
// within the run attaches to the same child, never a second one, so a
// caller that may repeat a call (after a crash, say) passes a key derived
// from its own state. Without it Invoke draws a random key, once per call,
// and every re-attach of the call reuses it.
func WithAgentIdempotencyKey(key string) AgentOption {
	return func(o *agentOptions) { o.idempotencyKey = key }
}

// Agents groups the agent calls of a Client:
// client.Agents().Invoke(ctx, agentID, message).
type Agents struct{ c *Client }

// Agents returns c's agent-call methods.
func (c *Client) Agents() Agents { return Agents{c: c} }

// Invoke is Client.InvokeAgent.
func (a Agents) Invoke(ctx context.Context, agentID, message string, opts ...AgentOption) (*AgentStream, error) {
	return a.c.InvokeAgent(ctx, agentID, message, opts...)
}

type invokeAgentBody struct {
	Message        Message `json:"message"`
	IdempotencyKey string  `json:"idempotency_key"`
}

// InvokeAgent runs agentID as a child run of c's run with message as its
// input and returns the child's stream, open (POST
// /v1/agents/{agent_id}:invoke, Accept: text/event-stream). The agent may
// call only the agents in its linked_agents.
//
// ctx bounds the whole stream, not just this call. The child belongs to the
// platform: when the stream breaks (a connection reset, a proxy restart, no
// byte for AgentReadTimeout) it is attached again with the same idempotency
// key, the platform replays the child's events from its first and the ones
// seen already are skipped by seq; ending ctx or Close stops following it,
// and the child goes on.
//
// A refusal is a *SubAgentError with the HTTP status (agent_not_linked,
// agent_not_found, max_depth_exceeded …). A 429 rate_limited (the key's
// request rate) is not one: the call is sent again, with its key, after the
// wait the platform named, or — when that wait would outlast ctx — the
// 429's *APIError is returned.
func (c *Client) InvokeAgent(ctx context.Context, agentID, message string, opts ...AgentOption) (*AgentStream, error) {
	o := agentOptions{readTimeout: AgentReadTimeout, retryBase: toolRetryBase}
	for _, f := range opts {
		f(&o)
	}
	if c == nil {
		return nil, ErrNotConfigured
	}
	if agentID == "" {
		return nil, errors.New("agentplane: invoke agent: no agent id")
	}
	if c.RunID == "" {
		return nil, fmt.Errorf("agentplane: invoke agent %s: no run id (use Request.Client or WithRun)", agentID)
	}
	if o.idempotencyKey == "" {
		o.idempotencyKey = newIdempotencyKey()
	}
	body, err := json.Marshal(invokeAgentBody{Message: Message{Role: "user", Content: message}, IdempotencyKey: o.idempotencyKey})
	if err != nil {
		return nil, err
	}
	s := &AgentStream{c: c, ctx: ctx, agentID: agentID, key: o.idempotencyKey, body: body, opts: o}
	backoff := o.retryBase
	failures := 0
	for {
		err := s.open()
		if err == nil {
			return s, nil
		}
		if !transient(ctx, err) {
			return nil, err
		}
		if rl := rateLimited(err); rl != nil {
			if werr := waitRateLimit(ctx, err, rl, &backoff); werr != nil {
				return nil, fmt.Errorf("agentplane: invoke agent %s: %w", agentID, werr)
			}
			continue
		}
		failures++
		if failures >= AgentMaxAttempts {
			return nil, err
		}
		if serr := sleep(ctx, jitter(backoff/2, backoff)); serr != nil {
			return nil, fmt.Errorf("%w (after %v)", serr, err)
		}
		backoff = min(2*backoff, toolRetryCap)
	}
}

// AgentStream is a child run being followed. Next gives its events in
// order; Text and Result wait for its end. It is read by one goroutine;
// Close may be called from any.
type AgentStream struct {
	c       *Client
	ctx     context.Context
	agentID string
	key     string
	body    []byte
	opts    agentOptions

	runID    string
	attaches int
	lastSeq  int64
	deltas   strings.Builder
	end      *AgentEvent
	result   *AgentResult

	mu     sync.Mutex
	closed bool
	cancel context.CancelFunc // of the open attach
	actx   context.Context    // of the open attach: its cause says whether it fell silent
	resp   *http.Response
	rd     *bufio.Reader
	idle   *time.Timer
}

// RunID is the child's run id.
func (s *AgentStream) RunID() string { return s.runID }

// IdempotencyKey is the key that attaches to this child again.
func (s *AgentStream) IdempotencyKey() string { return s.key }

// Attaches counts the streams opened for the call: 1, plus one per
// re-attach after a broken stream.
func (s *AgentStream) Attaches() int { return s.attaches }

// Done reports whether the child's last event (done or error) was read.
func (s *AgentStream) Done() bool { return s.end != nil }

// open sends the invoke (again) and keeps the stream.
func (s *AgentStream) open() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("agentplane: agent call closed")
	}
	s.mu.Unlock()
	c := s.c
	if c.BaseURL == "" {
		return fmt.Errorf("agentplane: no platform URL (set %s)", EnvURL)
	}
	path := "/v1/agents/" + url.PathEscape(s.agentID) + ":invoke"
	actx, cancelCause := context.WithCancelCause(s.ctx)
	cancel := func() { cancelCause(nil) }
	req, err := http.NewRequestWithContext(actx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(s.body))
	if err != nil {
		cancel()
		return fmt.Errorf("agentplane: POST %s: %w", path, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	for k, v := range c.attribution() {
		req.Header.Set(k, v)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	// No answer within the read timeout is a dead connection too.
	idle := time.AfterFunc(s.opts.readTimeout, func() { cancelCause(errNoAnswer) })
	resp, err := hc.Do(req)
	if err != nil {
		idle.Stop()
		err = s.silent(actx, err)
		cancel()
		return fmt.Errorf("agentplane: POST %s: %w", path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		idle.Stop()
		cancel()
		ae := apiError(resp.StatusCode, resp.Header, raw)
		// A 429 is no refusal of the call (see rateLimited): kept an
		// *APIError for the callers to wait out.
		if ae.Status >= 400 && ae.Status <= 499 && ae.Status != http.StatusTooManyRequests {
			return &SubAgentError{AgentID: s.agentID, RunID: s.runID, Code: ae.Code, Message: ae.Message, Status: ae.Status, api: ae}
		}
		return ae
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		idle.Stop()
		cancel()
		return fmt.Errorf("agentplane: POST %s: expected text/event-stream, got %q", path, ct)
	}
	if id := resp.Header.Get("x-child-run-id"); id != "" {
		s.runID = id
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		resp.Body.Close()
		idle.Stop()
		cancel()
		return errors.New("agentplane: agent call closed")
	}
	s.attaches++
	s.resp, s.rd, s.cancel, s.actx, s.idle = resp, bufio.NewReader(resp.Body), cancel, actx, idle
	return nil
}

// silent is err, the failure of an attach whose context is actx, said as
// errNoAnswer when the read timeout cut it: the caller's ctx has not ended,
// and errors.Is(err, context.Canceled) must not say it has.
func (s *AgentStream) silent(actx context.Context, err error) error {
	if s.ctx.Err() == nil && errors.Is(context.Cause(actx), errNoAnswer) {
		return fmt.Errorf("%w: nothing within %v", errNoAnswer, s.opts.readTimeout)
	}
	return err
}

// drop closes the open attach, if any.
func (s *AgentStream) drop() {
	s.mu.Lock()
	resp, cancel, idle := s.resp, s.cancel, s.idle
	s.resp, s.rd, s.cancel, s.actx, s.idle = nil, nil, nil, nil, nil
	s.mu.Unlock()
	if idle != nil {
		idle.Stop()
	}
	if cancel != nil {
		cancel()
	}
	if resp != nil {
		resp.Body.Close()
	}
}

// Close stops following the child (it goes on running on the platform).
func (s *AgentStream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.drop()
	return nil
}

// Next returns the child's next event, io.EOF after its last (done or
// error), attaching again as often as a broken stream needs. Other errors:
// ctx's, a refusal of a re-attach (*SubAgentError, e.g. run_not_active when
// the caller's run ended), or a platform that stays unreachable.
func (s *AgentStream) Next() (AgentEvent, error) {
	if s.end != nil {
		return AgentEvent{}, io.EOF
	}
	backoff := s.opts.retryBase
	attempts := 0
	retry := func(cause error) error {
		s.drop()
		attempts++
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		if attempts >= AgentMaxAttempts {
			return fmt.Errorf("agentplane: agent %s: child run %s: stream broke off: %w", s.agentID, s.runID, cause)
		}
		if err := sleep(s.ctx, jitter(backoff/2, backoff)); err != nil {
			return err
		}
		backoff = min(2*backoff, toolRetryCap)
		return nil
	}
	for {
		s.mu.Lock()
		closed, rd, idle, actx := s.closed, s.rd, s.idle, s.actx
		s.mu.Unlock()
		if closed {
			return AgentEvent{}, errors.New("agentplane: agent call closed")
		}
		if rd == nil {
			if err := s.open(); err != nil {
				if !transient(s.ctx, err) {
					return AgentEvent{}, err
				}
				if rl := rateLimited(err); rl != nil {
					// Not counted: the child goes on, and the same key
					// attaches to it once the request is let through.
					if werr := waitRateLimit(s.ctx, err, rl, &backoff); werr != nil {
						return AgentEvent{}, werr
					}
					continue
				}
				if rerr := retry(err); rerr != nil {
					return AgentEvent{}, rerr
				}
				continue
			}
			continue
		}
		ev, err := readAgentEvent(rd, func() { idle.Reset(s.opts.readTimeout) })
		if err != nil {
			err = s.silent(actx, err)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the stream ended before the child did
			}
			if rerr := retry(err); rerr != nil {
				return AgentEvent{}, rerr
			}
			continue
		}
		if ev.Type == "error" && ev.Seq == 0 {
			// The platform lost its log stream (stream_failed): attaching
			// again resumes it. Counted like any broken stream, so a
			// platform that keeps failing is not re-invoked in a tight loop.
			var f struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Data, &f)
			if rerr := retry(fmt.Errorf("%s: %s", f.Code, f.Message)); rerr != nil {
				return AgentEvent{}, rerr
			}
			continue
		}
		if ev.Seq != 0 && ev.Seq <= s.lastSeq {
			continue // replayed after a re-attach: seen already
		}
		if ev.Seq != 0 {
			s.lastSeq = ev.Seq
		}
		if ev.Type == "delta" {
			s.deltas.WriteString(ev.Text)
		}
		if ev.Type == "done" || ev.Type == "error" || ev.Type == "input_required" {
			e := ev
			s.end = &e
			s.drop()
		}
		return ev, nil
	}
}

// Result waits for the child's end and returns how it ended; a child that
// failed or was cancelled gives a *SubAgentError with its code (and the
// result in .Result).
func (s *AgentStream) Result() (*AgentResult, error) {
	for s.end == nil {
		if _, err := s.Next(); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	res := s.buildResult()
	if res.Status != "DONE" && res.Status != "INPUT_REQUIRED" {
		e := &SubAgentError{AgentID: s.agentID, RunID: s.runID, RunStatus: res.Status, Code: strings.ToLower(res.Status), Result: res}
		if res.Error != nil {
			e.Code, e.Message = res.Error.Code, res.Error.Message
		}
		return res, e
	}
	return res, nil
}

// Text waits for the child's end and returns its whole output; a failed
// child gives a *SubAgentError, a child that asked back an
// *InputRequiredError (a handler returning it asks the user the same
// question).
func (s *AgentStream) Text() (string, error) {
	res, err := s.Result()
	if err != nil {
		return "", err
	}
	if res.Status == "INPUT_REQUIRED" {
		var detail any
		if len(res.Detail) > 0 {
			detail = res.Detail
		}
		return "", &InputRequiredError{Question: res.Question, Detail: detail, RunID: res.RunID}
	}
	return res.Output, nil
}

func (s *AgentStream) buildResult() *AgentResult {
	if s.result != nil {
		return s.result
	}
	var d struct {
		Status     string          `json:"status"`
		Output     *string         `json:"output"`
		Usage      json.RawMessage `json:"usage"`
		TotalUsage json.RawMessage `json:"total_usage"`
		Code       string          `json:"code"`
		Message    string          `json:"message"`
	}
	_ = json.Unmarshal(s.end.Data, &d)
	res := &AgentResult{RunID: s.runID, Status: d.Status, Usage: d.Usage, TotalUsage: d.TotalUsage}
	if len(res.Usage) == 0 || string(res.Usage) == "null" {
		res.Usage = json.RawMessage(`{}`)
	}
	if len(res.TotalUsage) == 0 {
		res.TotalUsage = json.RawMessage(`{}`)
	}
	if s.end.Type == "input_required" {
		var q struct {
			Question string          `json:"question"`
			Detail   json.RawMessage `json:"detail"`
		}
		_ = json.Unmarshal(s.end.Data, &q)
		res.Status, res.Question, res.Detail = "INPUT_REQUIRED", q.Question, q.Detail
		res.Usage = json.RawMessage(`{}`)
		s.result = res
		return res
	}
	if s.end.Type == "done" {
		if res.Status == "" {
			res.Status = "DONE"
		}
		if d.Output != nil {
			res.Output = *d.Output
		} else {
			res.Output = s.deltas.String()
		}
	} else {
		if d.Code == "" {
			d.Code = "failed"
		}
		if res.Status == "" {
			res.Status = "FAILED"
			if d.Code == "cancelled" || d.Code == "parent_ended" {
				res.Status = "CANCELLED"
			}
		}
		res.Usage = json.RawMessage(`{}`)
		res.Error = &ToolCallError{Code: d.Code, Message: d.Message}
	}
	s.result = res
	return res
}

// readAgentEvent reads one SSE event, skipping comments; progress is called
// for every line read (it holds the idle timer off).
func readAgentEvent(rd *bufio.Reader, progress func()) (AgentEvent, error) {
	var name string
	var data []string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return AgentEvent{}, err
		}
		progress()
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if name == "" && data == nil {
				continue
			}
			raw := json.RawMessage(strings.Join(data, "\n"))
			var f struct {
				Type        string `json:"type"`
				RunID       string `json:"run_id"`
				ParentRunID string `json:"parent_run_id"`
				Seq         int64  `json:"seq"`
				Text        string `json:"text"`
			}
			if err := json.Unmarshal(raw, &f); err != nil {
				return AgentEvent{}, fmt.Errorf("agentplane: bad event %q: %w", name, err)
			}
			if name == "" {
				name = f.Type
			}
			ev := AgentEvent{Type: name, RunID: f.RunID, ParentRunID: f.ParentRunID, Seq: f.Seq, Data: raw}
			if name == "delta" {
				ev.Text = f.Text
			}
			return ev, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}
