package agentplane

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Tool call statuses as the platform reports them (ToolCall.Status).
const (
	ToolStatusSucceeded = "succeeded"
	ToolStatusPending   = "pending"
	ToolStatusFailed    = "failed"
)

// Timing of InvokeTool. The defaults follow seed 001 §2.1: short long-polls
// that no gateway cuts, a jittered pause between them so that many agents
// woken together do not poll in lockstep, and a bounded retry of transient
// failures.
const (
	// ToolWaitTimeout is the long-poll each :wait call asks for. It stays well
	// under the 60 s idle timeout of common proxies and load balancers.
	ToolWaitTimeout = 30 * time.Second
	// ToolWaitPauseMin and ToolWaitPauseMax bound the random pause between
	// two :wait rounds. :wait answers at once when the call is terminal, so
	// the pause is only paid after a round that timed out still pending;
	// 200–800 ms costs nothing against a 30 s round and breaks up herds.
	ToolWaitPauseMin = 200 * time.Millisecond
	ToolWaitPauseMax = 800 * time.Millisecond
	// ToolMaxAttempts bounds how often one request (an invoke or one :wait)
	// is sent when it fails with a connection error or 502/503/504. The
	// backoff between attempts doubles from toolRetryBase up to toolRetryCap,
	// jittered. A 429 rate_limited is not counted: the request is sent again
	// once the wait the platform named is over, for as long as ctx allows.
	ToolMaxAttempts = 5
	// ToolAttemptGrace is how long one request (an invoke or one :wait)
	// may take to answer beyond the time the platform may hold it: for an
	// invoke its inline wait for a server tool (30 s, API.md), for a :wait
	// the timeout_ms asked for. A request still unanswered then is abandoned and
	// counted as a transient failure (retried with backoff, at most
	// ToolMaxAttempts sends): a proxy or platform that took the
	// connection but never answers would otherwise hold the call — and,
	// as the handler's keep-alives hide it from the platform's idle
	// timeout, the run — until ctx ends. A re-sent invoke carries the same
	// idempotency key, so the platform answers it with the call the first
	// one may have created: the tool is never called twice.
	ToolAttemptGrace = 15 * time.Second
)

const (
	toolRetryBase = 100 * time.Millisecond
	toolRetryCap  = 2 * time.Second
	// toolInvokeWait is how long the platform's :invoke may wait for an
	// allowed server tool before it answers pending (API.md "Calls").
	toolInvokeWait = 30 * time.Second
)

// ToolCall is the platform's view of one tool call (GET /v1/tool_calls/{id}).
type ToolCall struct {
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	RunID      string `json:"run_id"`
	// Status is ToolStatusSucceeded, ToolStatusPending or ToolStatusFailed.
	Status string `json:"status"`
	// State is the raw state, e.g. "WAITING_APPROVAL", "SUCCEEDED", "REJECTED".
	State string `json:"state"`
	// Result is the tool's answer when Status is succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	// Error says why when Status is failed.
	Error *ToolCallError `json:"error,omitempty"`
	// ApprovalID is set when the call needs (or needed) an approval.
	ApprovalID string `json:"approval_id,omitempty"`
	// CreatedAt and UpdatedAt are the platform's timestamps, as sent.
	CreatedAt json.RawMessage `json:"created_at,omitempty"`
	UpdatedAt json.RawMessage `json:"updated_at,omitempty"`
}

// ToolCallError is the error object of a failed tool call.
type ToolCallError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Detail  json.RawMessage `json:"detail,omitempty"`
}

// ToolError is every failure of a tool call: the platform refused the call
// (a 4xx answer to the invoke or to a :wait) or the call ended failed. Code
// is the platform's error code:
//
//   - refused: the answer's code — "invalid_args" (the arguments do not
//     match the tool's schema), "tool_not_found", "forbidden",
//     "run_not_active" …; Status is the HTTP status and errors.As also finds
//     the *APIError;
//   - ended failed: the lower-case state ("rejected", "blocked", "timeout",
//     "expired", "cancelled") or, for FAILED, the cause ("client_offline",
//     "tool_http_error", "tool_unreachable", "tool_protocol_error",
//     "tool_error", "failed"); Status is 0.
//
// Find it with errors.As. What is not a ToolError: a platform that stays
// unreachable or answers 5xx through every retry (the call may still be
// running), a 429 rate_limited whose wait ctx leaves no time for (an
// *APIError with Status 429 and RetryAfter; the call, if it was created, is
// still pending), and ctx ending.
//
// A handler that returns a *ToolError (wrapped or not) ends its run with
// `event: error {code: Code}`, so an unhandled rejection reads as one.
type ToolError struct {
	ToolName   string
	ToolCallID string
	// State is the call's final raw state, e.g. "REJECTED" ("" when the
	// platform refused the call).
	State   string
	Code    string
	Message string
	// Detail is the error's detail object, if the platform sent one.
	Detail json.RawMessage
	// ApprovalID is the approval the call went through, if any.
	ApprovalID string
	// Status is the HTTP status of a refusal, 0 for a call that ended failed.
	Status int

	api *APIError
}

// Unwrap gives the *APIError of a refusal, so code that checks for an
// *APIError keeps working.
func (e *ToolError) Unwrap() error {
	if e.api == nil {
		return nil
	}
	return e.api
}

func (e *ToolError) Error() string {
	msg := fmt.Sprintf("agentplane: tool %s failed (%s)", e.ToolName, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.ToolCallID != "" {
		msg += " [tool call " + e.ToolCallID + "]"
	}
	return msg
}

// FunctionTool is one tool as an OpenAI function-calling tool, ready to be
// passed in a chat completion request's "tools".
type FunctionTool struct {
	Type     string       `json:"type"`
	Function FunctionSpec `json:"function"`
}

// FunctionSpec is the "function" object of a FunctionTool. Name is the
// tool's name spelt for OpenAI: every "." becomes "__" and the "@" of an
// MCP server's tool "{server}@{tool}" becomes "--" (see
// ToolNameFromFunction).
type FunctionSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolNameFromFunction maps an OpenAI function name, as a model returns it
// in a tool call, back to the platform's tool name ("payments__transfer" →
// "payments.transfer", "files--read__text" → "files@read.text"). The
// platform accepts either spelling, so this is for display and logs.
func ToolNameFromFunction(functionName string) string {
	if server, tool, ok := strings.Cut(functionName, "--"); ok {
		return server + "@" + strings.ReplaceAll(tool, "__", ".")
	}
	return strings.ReplaceAll(functionName, "__", ".")
}

// ToolOption tunes one InvokeTool call.
type ToolOption func(*toolOptions)

type toolOptions struct {
	idempotencyKey string
	timeout        time.Duration
	onPending      func(ToolCall)

	waitTimeout        time.Duration
	pauseMin, pauseMax time.Duration
	retryBase          time.Duration
	invokeWait, grace  time.Duration
}

// WithIdempotencyKey sets the call's idempotency key. The platform answers
// the same key (within the run) with the same tool call, so a caller that
// may repeat an invoke — after a crash, say — passes a key derived from its
// own state. Without it InvokeTool draws a random key, once per call.
func WithIdempotencyKey(key string) ToolOption {
	return func(o *toolOptions) { o.idempotencyKey = key }
}

// WithToolTimeout overrides the tool's execution timeout for this call
// (sent as timeout_ms). It bounds the platform's wait for the tool, not
// InvokeTool: bound that with ctx.
func WithToolTimeout(d time.Duration) ToolOption {
	return func(o *toolOptions) { o.timeout = d }
}

// WithOnPending calls f once, with the invoke's answer, when the call does
// not finish at once (it waits for an approval or for the user's client).
// A handler can use it to tell the user what it is waiting for.
func WithOnPending(f func(ToolCall)) ToolOption {
	return func(o *toolOptions) { o.onPending = f }
}

// Tools groups the tool calls of a Client: client.Tools().Invoke(ctx, name, args).
type Tools struct{ c *Client }

// Tools returns c's tool-call methods.
func (c *Client) Tools() Tools { return Tools{c: c} }

// Invoke is Client.InvokeTool.
func (t Tools) Invoke(ctx context.Context, name string, args any, opts ...ToolOption) (json.RawMessage, error) {
	return t.c.InvokeTool(ctx, name, args, opts...)
}

// List is Client.ListTools.
func (t Tools) List(ctx context.Context) ([]FunctionTool, error) { return t.c.ListTools(ctx) }

// Get is Client.ToolCall.
func (t Tools) Get(ctx context.Context, toolCallID string) (*ToolCall, error) {
	return t.c.ToolCall(ctx, toolCallID)
}

type invokeToolBody struct {
	RunID          string `json:"run_id"`
	Args           any    `json:"args"`
	IdempotencyKey string `json:"idempotency_key"`
	TimeoutMS      int64  `json:"timeout_ms,omitempty"`
}

// InvokeTool calls the tool name with args (marshalled as JSON; a
// json.RawMessage is sent as is; nil sends {}) for c's run and returns the
// tool's result once the call is over.
//
// It sends POST /v1/tools/{name}:invoke; while the call is pending (waiting
// for an approval, the user's client or a slow tool) it long-polls
// POST /v1/tool_calls/{id}:wait in rounds of ToolWaitTimeout, pausing a
// random ToolWaitPauseMin–ToolWaitPauseMax between rounds. Each request is
// retried, with the same idempotency key, on connection errors and
// 502/503/504 (at most ToolMaxAttempts sends, with backoff); a 4xx answer is
// not retried, but for a 429 rate_limited: the platform turned the request
// away before any work, so it is sent again after the wait the platform
// named (retry_after_ms, else Retry-After, else the backoff), however often,
// unless that wait would outlast ctx — then the 429's *APIError, with its
// RetryAfter, is returned at once.
//
// A request the platform does not answer within its time (see
// ToolAttemptGrace) is abandoned and retried like a connection error.
//
// Every failure of the call is a *ToolError: a 4xx refusal (invalid_args,
// tool_not_found …; it wraps the *APIError) and a call that ended failed
// (rejected, timeout …). A platform still unreachable, silent or answering
// 5xx after the retries gives an *APIError or a transport error. ctx bounds the whole
// call: when it ends, InvokeTool returns an error wrapping ctx.Err() that
// names the tool call, which keeps going on the platform (read it later with
// ToolCall).
func (c *Client) InvokeTool(ctx context.Context, name string, args any, opts ...ToolOption) (json.RawMessage, error) {
	o := toolOptions{waitTimeout: ToolWaitTimeout, pauseMin: ToolWaitPauseMin, pauseMax: ToolWaitPauseMax, retryBase: toolRetryBase,
		invokeWait: toolInvokeWait, grace: ToolAttemptGrace}
	for _, f := range opts {
		f(&o)
	}
	if c == nil {
		return nil, ErrNotConfigured
	}
	if name == "" {
		return nil, errors.New("agentplane: invoke tool: no tool name")
	}
	if c.RunID == "" {
		return nil, fmt.Errorf("agentplane: invoke tool %s: no run id (use Request.Client or WithRun)", name)
	}
	if o.idempotencyKey == "" {
		o.idempotencyKey = newIdempotencyKey()
	}
	if args == nil {
		args = struct{}{}
	}
	body := invokeToolBody{RunID: c.RunID, Args: args, IdempotencyKey: o.idempotencyKey}
	if o.timeout > 0 {
		body.TimeoutMS = max(1, o.timeout.Milliseconds())
	}
	var tc ToolCall
	if err := c.retrying(ctx, o, o.invokeWait+o.grace, http.MethodPost, "/v1/tools/"+url.PathEscape(name)+":invoke", nil, body, &tc); err != nil {
		if te := refused(name, "", err); te != nil {
			return nil, te
		}
		return nil, fmt.Errorf("agentplane: invoke tool %s: %w", name, err)
	}
	if tc.Status == ToolStatusPending && o.onPending != nil {
		o.onPending(tc)
	}
	for tc.Status == ToolStatusPending {
		if tc.ToolCallID == "" {
			return nil, fmt.Errorf("agentplane: invoke tool %s: pending answer without a tool_call_id", name)
		}
		id, state := tc.ToolCallID, tc.State
		tc = ToolCall{}
		ms := waitMS(ctx, o.waitTimeout)
		q := url.Values{"timeout_ms": {strconv.FormatInt(ms, 10)}}
		if err := c.retrying(ctx, o, time.Duration(ms)*time.Millisecond+o.grace, http.MethodPost, "/v1/tool_calls/"+url.PathEscape(id)+":wait", q, nil, &tc); err != nil {
			if te := refused(name, id, err); te != nil {
				return nil, te
			}
			if rateLimited(err) != nil {
				return nil, fmt.Errorf("agentplane: tool %s: call %s still pending (%s): %w", name, id, state, err)
			}
			return nil, fmt.Errorf("agentplane: tool %s: wait for call %s (%s): %w", name, id, state, err)
		}
		if tc.Status != ToolStatusPending {
			break
		}
		if err := sleep(ctx, jitter(o.pauseMin, o.pauseMax)); err != nil {
			return nil, fmt.Errorf("agentplane: tool %s: call %s still %s: %w", name, id, tc.State, err)
		}
	}
	switch tc.Status {
	case ToolStatusSucceeded:
		return tc.Result, nil
	case ToolStatusFailed:
		return nil, toolError(name, &tc)
	}
	return nil, fmt.Errorf("agentplane: tool %s: call %s: unknown status %q", name, tc.ToolCallID, tc.Status)
}

// ListTools returns the tools c's agent may call in c's run, as OpenAI
// function-calling tools (GET /v1/tools?run_id=).
func (c *Client) ListTools(ctx context.Context) ([]FunctionTool, error) {
	if c == nil {
		return nil, ErrNotConfigured
	}
	var q url.Values
	if c.RunID != "" {
		q = url.Values{"run_id": {c.RunID}}
	}
	var out struct {
		Tools []FunctionTool `json:"tools"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/tools", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// ToolCall reads a tool call's current view (GET /v1/tool_calls/{id}).
func (c *Client) ToolCall(ctx context.Context, toolCallID string) (*ToolCall, error) {
	var tc ToolCall
	if err := c.do(ctx, http.MethodGet, "/v1/tool_calls/"+url.PathEscape(toolCallID), nil, nil, &tc); err != nil {
		return nil, err
	}
	return &tc, nil
}

// refused turns a 4xx answer about a tool call into its *ToolError; other
// errors give nil, and so does a 429: the request was turned away before
// any work, which says nothing about the call.
func refused(name, toolCallID string, err error) *ToolError {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 499 || ae.Status == http.StatusTooManyRequests {
		return nil
	}
	return &ToolError{ToolName: name, ToolCallID: toolCallID, Code: ae.Code, Message: ae.Message, Status: ae.Status, api: ae}
}

func toolError(name string, tc *ToolCall) *ToolError {
	e := &ToolError{ToolName: tc.ToolName, ToolCallID: tc.ToolCallID, State: tc.State, ApprovalID: tc.ApprovalID}
	if e.ToolName == "" {
		e.ToolName = name
	}
	if tc.Error != nil {
		e.Code, e.Message, e.Detail = tc.Error.Code, tc.Error.Message, tc.Error.Detail
	}
	if e.Code == "" {
		e.Code = strings.ToLower(tc.State)
	}
	if e.Code == "" {
		e.Code = "failed"
	}
	return e
}

// retrying is do, sent again after a transient failure (see transient) with
// a jittered exponential backoff, at most ToolMaxAttempts times, and after a
// 429 once its wait is over (see waitRateLimit), however often. The body is
// the same on every attempt, and so is its idempotency key: the platform
// answers a repeated invoke with the call the first one created (a :wait is
// a read). Each attempt has attempt to answer (see ToolAttemptGrace); one
// that has not is a transient failure.
func (c *Client) retrying(ctx context.Context, o toolOptions, attempt time.Duration, method, path string, q url.Values, body, out any) error {
	backoff := o.retryBase
	failures := 0
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := c.do(actx, method, path, q, body, out)
		timedOut := err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if timedOut {
			// Not wrapping context.DeadlineExceeded: the caller's ctx
			// has not ended, and errors.Is must not say it has.
			err = fmt.Errorf("agentplane: %s %s: %w (no answer within %v)", method, path, errNoAnswer, attempt)
		}
		if err == nil || !transient(ctx, err) {
			return err
		}
		if rl := rateLimited(err); rl != nil {
			if werr := waitRateLimit(ctx, err, rl, &backoff); werr != nil {
				return werr
			}
			continue
		}
		failures++
		if failures >= ToolMaxAttempts {
			return err
		}
		if serr := sleep(ctx, jitter(backoff/2, backoff)); serr != nil {
			return fmt.Errorf("%w (after %v)", serr, err)
		}
		backoff = min(2*backoff, toolRetryCap)
	}
}

// rateLimited returns the *APIError of a 429 answer (the key's request rate,
// API.md "Rate limits"), or nil.
func rateLimited(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
		return ae
	}
	return nil
}

// waitRateLimit waits out the 429 rl (err wraps it) before the request is
// sent again: the wait the platform named, never less, and up to a quarter
// more (at most a second) so agents turned away together do not come back
// together; without one, the jittered backoff (which then doubles). A 429
// is not a failure, so the caller does not count it. It returns err at once
// when the wait would outlast ctx's deadline — the rate limit, with its
// RetryAfter, is then what the caller learns, not a bare deadline — and an
// error wrapping both ctx's and err when ctx ends during the wait.
func waitRateLimit(ctx context.Context, err error, rl *APIError, backoff *time.Duration) error {
	d := rl.RetryAfter
	if d > 0 {
		d += jitter(0, min(d/4, time.Second))
	} else {
		d = jitter(*backoff/2, *backoff)
		*backoff = min(2*(*backoff), toolRetryCap)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return err
	}
	if serr := sleep(ctx, d); serr != nil {
		return fmt.Errorf("%w (after %w)", serr, err)
	}
	return nil
}

// transient reports whether err is worth sending the request again for: no
// answer at all (connection refused or reset, the answer cut short), a
// gateway's 502/503/504, or a 429 (the request was turned away before any
// work; see waitRateLimit). Any other answer would come back the same.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
			return true
		}
		return false
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errNoAnswer)
}

// errNoAnswer is wrapped by the error of a request abandoned after its
// attempt's time (see retrying).
var errNoAnswer = errors.New("the platform did not answer")

// waitMS is the timeout_ms of one :wait round: d, or less when ctx ends
// sooner, so the platform answers before the caller gives up.
func waitMS(ctx context.Context, d time.Duration) int64 {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(1, d.Milliseconds())
}

// jitter returns a uniformly random duration in [lo, hi].
func jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newIdempotencyKey() string {
	return "idk_" + crand.Text()
}
