package llmproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/tracing"
)

// Causes of a call's context being cancelled by the proxy itself.
var (
	errFirstByteTimeout = errors.New("no response from upstream within the first-byte timeout")
	errIdleTimeout      = errors.New("upstream stream idle longer than the idle timeout")
	errTotalTimeout     = errors.New("call exceeded the total timeout")
	errClientGone       = errors.New("client went away")
)

// call is the state of one proxied call, from admission to llm_call_done.
type call struct {
	p      *Proxy
	ep     *endpoint
	caller Caller
	id     string
	start  time.Time

	model, upstreamModel string
	stream               bool
	injected             bool // include_usage was turned on by us
	strip                bool // …and the client did not ask: drop the usage chunk

	ctx    context.Context
	cancel context.CancelCauseFunc

	// watchdog: one timer serves the first-byte and the idle timeout.
	dog      *time.Timer
	gotFirst atomic.Bool
	ttft     time.Duration
	sentAt   time.Time // the first upstream request left (proxy overhead)

	upstream  string
	attempts  int
	status    int
	usage     Usage
	haveUsage bool
	noUsage   bool // the upstream refused the call: no usage is expected
	chunks    int
	sawEnd    bool // the stream's last event was read from upstream…
	complete  bool // …and reached the client: later errors do not fail the call
	// sawUsageEnd: a chat stream's usage came in a chunk sent only once the
	// generation ended, so the stream ending cleanly without [DONE] after
	// it lost nothing.
	sawUsageEnd bool
	streamErr   bool // the upstream reported an error in its stream: the call's outcome
	err         *CallError
	outcome     string
	wroteHead   bool // headers went to the client; errors can no longer be answered

	span trace.Span // the call's span (DESIGN §14), ended by finish

	// The deferred llm_call_started: recMu orders it before the done event.
	recMu        sync.Mutex
	startedTimer *time.Timer
	ended        bool // llm_call_done is being recorded: no start any more
}

// serveCall handles one metered endpoint.
func (p *Proxy) serveCall(w http.ResponseWriter, r *http.Request, ep *endpoint) {
	start := time.Now()
	caller, err := p.auth(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(p.rt.ups) == 0 {
		writeError(w, errNotConfigured)
		return
	}
	if e := p.lim.admit(caller.AgentID, start); e != nil {
		writeError(w, e)
		return
	}
	body, err := readBody(r, p.cfg.Limits.MaxRequestBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	ri, err := inspectRequest(body)
	if err != nil {
		writeError(w, err)
		return
	}
	first, upModel, ok := p.rt.route(ri.model)
	if !ok {
		writeError(w, &Error{Status: http.StatusNotFound, Code: CodeModelNotFound,
			Message: "no upstream serves model " + strconv.Quote(ri.model)})
		return
	}

	c := &call{p: p, ep: ep, caller: caller, id: p.newID(), start: start,
		model: ri.model, upstreamModel: upModel, stream: ri.stream}
	c.injected = ep.chat && ri.stream && !ri.clientUsage
	c.strip = c.injected
	if b, ok := p.rec.(CallBeginner); ok {
		b.CallBegun(caller)
	}
	if after := p.cfg.StartedEventAfter; after < 0 {
		c.recordStarted()
	} else {
		c.startedTimer = time.AfterFunc(after, c.recordStarted)
	}

	// The call's span: a child of the agent's traceparent, if it sent one
	// (the invoke span it was given, or a span of its own); the upstream is
	// sent this span's traceparent.
	op := "chat" // gen_ai.operation.name: chat completions and responses alike
	if ep == epEmbeddings {
		op = "embeddings"
	}
	parent := r.Context()
	if caller.Traceparent != "" && !trace.SpanContextFromContext(parent).IsValid() {
		parent = tracing.WithTraceparent(parent, caller.Traceparent)
	}
	name := "" // only an exported span has a name: not a string per call
	if tracing.Enabled() {
		name = op + " " + c.model
	}
	ctx, span := tracing.Start(parent, name, trace.SpanKindClient)
	c.span = span
	if span.IsRecording() {
		tracing.SetAttributes(span, attribute.String("gen_ai.operation.name", op), attribute.String("gen_ai.request.model", c.model),
			tracing.RunID.String(caller.RunID), tracing.SessionID.String(caller.SessionID), tracing.AgentID.String(caller.AgentID),
			attribute.String("agentplane.llm_call_id", c.id), attribute.Bool("agentplane.stream", c.stream))
	}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	total := time.AfterFunc(p.cfg.Timeouts.Total, func() { c.cancel(errTotalTimeout) })
	defer func() {
		total.Stop()
		c.stopDog()
		c.cancel(context.Canceled)
	}()

	aborted := c.run(w, r, body, &ri, first)
	c.finish()
	if aborted {
		// Headers and part of the body are out: end the response
		// abnormally so the client sees an error, not a short success
		// (the net/http convention, as in httputil.ReverseProxy).
		panic(http.ErrAbortHandler)
	}
}

// readBody reads the request body, refusing more than limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	tooLarge := func() error {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeRequestTooLarge,
			Message: "request body exceeds " + respond.Size(limit)} // as every other route words it
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	var body []byte
	if r.ContentLength > 0 {
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, badRequest(CodeInvalidRequest, "reading request body: "+err.Error())
		}
		return body, nil
	}
	var b bytes.Buffer
	n, err := b.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, badRequest(CodeInvalidRequest, "reading request body: "+err.Error())
	}
	if n > limit {
		return nil, tooLarge()
	}
	return b.Bytes(), nil
}

// failure is a retryable upstream answer kept in case nothing better comes.
type failure struct {
	upstream string
	status   int
	header   http.Header
	body     []byte
}

// run makes the upstream attempts and forwards the answer. It reports
// whether the response must be aborted.
func (c *call) run(w http.ResponseWriter, r *http.Request, body []byte, ri *reqInfo, first *upstream) bool {
	p := c.p
	cands := p.rt.candidates(first)
	tried := make([]bool, len(cands))
	readyAt := make([]time.Time, len(cands)) // set when an upstream asked us to come back (Retry-After)
	var lastResp *failure                    // the last retryable answer, passed through if nothing better comes
	var lastErr error
	for c.attempts < p.cfg.MaxAttempts {
		i := pickCandidate(tried, readyAt, time.Now(), p.cfg.RetryAfterCap)
		if i < 0 {
			break
		}
		if wait := time.Until(readyAt[i]); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				c.failCtx()
				c.answerError(w)
				return false
			}
		}
		u := cands[i]
		tried[i], readyAt[i] = true, time.Time{}
		c.attempts++
		c.upstream = u.Name
		upModel := c.upstreamModel
		if u != first {
			upModel = upstreamModelFor(u, c.model, c.upstreamModel)
		}
		resp, err := c.send(r, u, rewriteRequest(body, ri, upModel, c.injected))
		if err != nil {
			c.stopDog()
			if c.ctx.Err() != nil {
				c.failCtx()
				c.answerError(w)
				return false
			}
			lastErr = err
			continue
		}
		if retryable(resp.StatusCode) && c.attempts < p.cfg.MaxAttempts {
			if ra, ok := retryAfter(resp.Header); ok && ra <= p.cfg.RetryAfterCap {
				readyAt[i] = time.Now().Add(ra)
			}
			if pickCandidate(tried, readyAt, time.Now(), p.cfg.RetryAfterCap) >= 0 {
				b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				c.stopDog()
				if err != nil && c.ctx.Err() != nil {
					c.failCtx()
					c.answerError(w)
					return false
				}
				lastResp = &failure{upstream: u.Name, status: resp.StatusCode, header: resp.Header, body: b}
				continue
			}
		}
		c.upstreamModel = upModel
		return c.forward(w, resp)
	}
	c.stopDog()
	c.noUsage = true // nothing was generated
	if lastResp != nil {
		c.upstream, c.status, c.outcome = lastResp.upstream, lastResp.status, OutcomeError
		c.err = upstreamError(lastResp.status, lastResp.body)
		h := w.Header()
		copyHeader(h, lastResp.header)
		h.Set("Content-Length", strconv.Itoa(len(lastResp.body)))
		w.WriteHeader(lastResp.status)
		c.wroteHead = true
		_, _ = w.Write(lastResp.body)
		return false
	}
	msg := "no upstream could be reached"
	if lastErr != nil {
		msg = "upstream " + c.upstream + " unreachable: " + lastErr.Error()
	}
	c.fail(http.StatusBadGateway, OutcomeError, CodeUpstreamError, msg)
	c.answerError(w)
	return false
}

// pickCandidate returns the next upstream to try: the first untried one, else
// the one that asked to be retried soonest within cap; -1 when none is left.
func pickCandidate(tried []bool, readyAt []time.Time, now time.Time, limit time.Duration) int {
	best := -1
	for i := range tried {
		if !tried[i] {
			return i
		}
		if !readyAt[i].IsZero() && readyAt[i].Sub(now) <= limit && (best < 0 || readyAt[i].Before(readyAt[best])) {
			best = i
		}
	}
	return best
}

// retryable reports whether an upstream status allows another attempt.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// retryAfter reads retry-after-ms (OpenAI's) or Retry-After (seconds or an
// HTTP date).
func retryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t)), true
	}
	return 0, false
}

// send makes one upstream request. The request carries c.ctx, so a client
// disconnect or a timeout cancels it at once.
func (c *call) send(r *http.Request, u *upstream, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, "", nil)
	if err != nil {
		return nil, err
	}
	req.URL = u.endpointURL(c.ep.suffix, r.URL.RawQuery)
	req.Host = req.URL.Host
	req.Header = upstreamHeader(r.Header, u.authorization)
	tracing.Inject(c.ctx, req.Header)
	req.ContentLength = int64(len(body))
	req.Body = io.NopCloser(bytes.NewReader(body))
	// GetBody lets the transport replay the body when a kept-alive
	// connection turns out dead before anything was written.
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	c.armDog()
	if c.sentAt.IsZero() {
		c.sentAt = time.Now()
	}
	return c.p.tr.RoundTrip(req)
}

// armDog starts the first-byte timeout of an attempt.
func (c *call) armDog() {
	fb := c.p.cfg.Timeouts.FirstByte
	if c.dog == nil {
		c.dog = time.AfterFunc(fb, c.dogFired)
		return
	}
	c.dog.Reset(fb)
}

func (c *call) dogFired() {
	if c.gotFirst.Load() {
		c.cancel(errIdleTimeout)
	} else {
		c.cancel(errFirstByteTimeout)
	}
}

// touch is called after every read of the upstream body that returned data:
// the first one records TTFT and switches the watchdog to the idle timeout.
func (c *call) touch() {
	if !c.gotFirst.Load() {
		c.ttft = time.Since(c.start)
		c.gotFirst.Store(true)
	}
	c.dog.Reset(c.p.cfg.Timeouts.Idle)
}

func (c *call) stopDog() {
	if c.dog != nil {
		c.dog.Stop()
	}
}

// fail sets the outcome of a call the proxy ends itself.
func (c *call) fail(status int, outcome, code, msg string) {
	if c.complete || c.streamErr {
		return
	}
	if !c.wroteHead { // else the client already has the upstream's status
		c.status = status
	}
	c.outcome = outcome
	c.err = &CallError{Code: code, Message: msg}
}

// failStream records an error the upstream reported inside its stream. It
// stays the call's outcome whatever follows — a [DONE], the client leaving
// (an SDK raises on the error and hangs up), a timeout: it is why the call
// failed.
func (c *call) failStream(e *CallError) {
	if c.complete || c.streamErr {
		return
	}
	c.outcome, c.err, c.streamErr = OutcomeError, e, true
}

// failCtx classifies a cancelled call context.
func (c *call) failCtx() {
	switch cause := context.Cause(c.ctx); cause {
	case errFirstByteTimeout, errIdleTimeout, errTotalTimeout:
		c.fail(http.StatusGatewayTimeout, OutcomeTimeout, CodeUpstreamTimeout, cause.Error())
	default:
		// The client's own context: it went away.
		c.fail(499, OutcomeCancelled, CodeClientCancelled, errClientGone.Error())
	}
}

// answerError tells the client what c.fail decided, if it can still hear it.
func (c *call) answerError(w http.ResponseWriter) {
	if c.wroteHead || c.outcome == OutcomeCancelled {
		return
	}
	writeError(w, &Error{Status: c.status, Code: c.err.Code, Message: c.err.Message})
	c.wroteHead = true
}

// recordStarted records llm_call_started unless the call has ended.
func (c *call) recordStarted() {
	c.recMu.Lock()
	defer c.recMu.Unlock()
	if !c.ended {
		c.p.rec.Record(c.caller, EventCallStarted, CallStarted{CallID: c.id, Model: c.model, Endpoint: c.ep.name, Stream: c.stream})
	}
}

// finish records llm_call_done and charges the token budget.
func (c *call) finish() {
	// After this no llm_call_started can be recorded, and one that was is
	// already queued: the done event always follows its start.
	c.recMu.Lock()
	c.ended = true
	c.recMu.Unlock()
	if c.startedTimer != nil {
		c.startedTimer.Stop()
	}
	if c.outcome == "" {
		c.outcome = OutcomeOK
	}
	d := CallDone{
		CallID:           c.id,
		StartedAt:        c.start.UnixMilli(),
		Model:            c.model,
		Endpoint:         c.ep.name,
		Stream:           c.stream,
		Status:           c.status,
		Outcome:          c.outcome,
		Upstream:         c.upstream,
		Attempts:         c.attempts,
		LatencyMS:        ms(time.Since(c.start)),
		PromptTokens:     c.usage.PromptTokens,
		CompletionTokens: c.usage.CompletionTokens,
		CachedTokens:     c.usage.CachedTokens,
		ReasoningTokens:  c.usage.ReasoningTokens,
		TotalTokens:      c.usage.TotalTokens,
		Chunks:           c.chunks,
		Error:            c.err,
	}
	if c.upstreamModel != c.model {
		d.UpstreamModel = c.upstreamModel
	}
	if c.gotFirst.Load() {
		d.TTFTMS = ms(c.ttft)
	}
	if !c.sentAt.IsZero() {
		d.ProxyOverheadMS = ms(c.sentAt.Sub(c.start))
	}
	// Usage is partial when the upstream would have reported it but the
	// call ended (or the upstream answered) without it.
	d.Partial = !c.haveUsage && !c.noUsage
	if pr, ok := c.p.priceFor(c.model, c.upstreamModel); ok {
		d.Price = &pr
		d.EstimatedCost = pr.Cost(c.usage)
	}
	c.p.rec.Record(c.caller, EventCallDone, d)
	if c.span.IsRecording() {
		// Only what a trace viewer needs beyond llm_call_done: every
		// attribute costs the exporter (BENCHMARKS.md, observability).
		tracing.SetAttributes(c.span, attribute.String("gen_ai.response.model", c.upstreamModel), tracing.Outcome.String(c.outcome),
			attribute.Int("http.response.status_code", c.status), attribute.String("agentplane.upstream", c.upstream),
			attribute.Int64("gen_ai.usage.input_tokens", c.usage.PromptTokens), attribute.Int64("gen_ai.usage.output_tokens", c.usage.CompletionTokens))
		if c.usage.CachedTokens > 0 || c.usage.ReasoningTokens > 0 {
			tracing.SetAttributes(c.span, attribute.Int64("agentplane.usage.cached_tokens", c.usage.CachedTokens), attribute.Int64("agentplane.usage.reasoning_tokens", c.usage.ReasoningTokens))
		}
		if c.attempts > 1 {
			tracing.SetAttributes(c.span, attribute.Int("agentplane.attempts", c.attempts))
		}
		if c.err != nil {
			tracing.Fail(c.span, c.err.Code)
		}
	}
	c.span.End()
	c.p.lim.charge(c.caller.AgentID, c.usage.TotalTokens, time.Now())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
