package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/llmproxy"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

// llmConfig builds the proxy's configuration: the config file's llm:
// section, with AGENTPLANE_LLM_BASE_URL/AGENTPLANE_LLM_API_KEY as the
// upstream when the file names none.
func llmConfig(cfg *config.Config) (llmproxy.Config, error) {
	var c llmproxy.Config
	if cfg.File.LLM.Kind != 0 {
		if err := cfg.File.LLM.Decode(&c); err != nil {
			return c, errors.New("config file llm: " + err.Error())
		}
	}
	if len(c.Upstreams) == 0 {
		c.Upstreams = llmproxy.ConfigFromEnv(cfg.LLMBaseURL, cfg.LLMAPIKey).Upstreams
	}
	return c, c.Validate()
}

// llmBridge connects the proxy to the rest of the platform: it
// authenticates agents (and the run they name) and writes the proxy's trace
// events behind the call into the run's session.
type llmBridge struct {
	keys *auth.Keys
	st   store.Store
	log  *eventlog.Log
	lg   *slog.Logger

	mu       sync.Mutex
	runs     map[string]runOwner // run id -> owner; immutable facts, safe to cache
	sessions map[string]bool     // agent sessions known to exist
	inflight map[string]*calls   // run id -> LLM calls started but not yet recorded as done
	// active holds the cached runs last read active, by session, until
	// something says they may have ended: their terminal event committed
	// here, or a notification that another process wrote to their session.
	// A run not in it has its status read from the store (issue 8: calls
	// for an ended run are refused). epoch counts those signals, so a
	// store read that raced one is not cached as active.
	active map[string]map[string]bool // session id -> run ids
	epoch  uint64

	metrics llmMetrics

	// invokeTraceparent gives a run's agent invoke traceparent (the run
	// manager's), for calls that carry none; nil: none.
	invokeTraceparent func(runID string) string
}

// llmMetrics are the LLM proxy's metrics (DESIGN §14), recorded as each
// call's llm_call_done is handed over.
type llmMetrics struct {
	calls, tokens, cost          *metrics.CounterVec
	ttft, latency, proxyOverhead *metrics.HistogramVec
}

func newLLMMetrics(r *metrics.Registry) llmMetrics {
	return llmMetrics{calls: metrics.LLMCalls(r), tokens: metrics.LLMTokens(r), cost: metrics.LLMCost(r),
		ttft: metrics.LLMTTFT(r), latency: metrics.LLMLatency(r), proxyOverhead: metrics.ProxyOverhead(r)}
}

func (m *llmMetrics) record(agentID string, d *llmproxy.CallDone) {
	m.calls.Inc(agentID, d.Model, d.Outcome)
	for _, t := range [...]struct {
		kind string
		n    int64
	}{{"prompt", d.PromptTokens}, {"completion", d.CompletionTokens}, {"cached", d.CachedTokens}, {"reasoning", d.ReasoningTokens}} {
		if t.n > 0 {
			m.tokens.Add(float64(t.n), agentID, d.Model, t.kind)
		}
	}
	if d.EstimatedCost > 0 {
		m.cost.Add(d.EstimatedCost, agentID, d.Model)
	}
	if d.TTFTMS > 0 {
		m.ttft.Observe(d.TTFTMS/1000, d.Model)
	}
	m.latency.Observe(d.LatencyMS/1000, d.Model)
	if d.ProxyOverheadMS > 0 {
		m.proxyOverhead.Observe(d.ProxyOverheadMS / 1000)
	}
}

// calls counts a run's unfinished LLM calls; idle, made when someone waits
// (a run's end, rarely during a call: not one channel per call), is closed
// when the count drops to zero.
type calls struct {
	n    int
	idle chan struct{}
}

type runOwner struct {
	agentID, sessionID, parentRunID string
	ended                           bool // once true, for good
}

// runCacheMax bounds the run cache; it is simply reset when full.
const runCacheMax = 100_000

func newLLMBridge(keys *auth.Keys, st store.Store, log *eventlog.Log, lg *slog.Logger, reg *metrics.Registry) *llmBridge {
	b := &llmBridge{keys: keys, st: st, log: log, lg: lg, runs: map[string]runOwner{}, sessions: map[string]bool{}, inflight: map[string]*calls{}, active: map[string]map[string]bool{},
		metrics: newLLMMetrics(reg)}
	log.Observe(b.committed, b.notified)
	return b
}

// errRunNotActive answers a call naming a run that has ended, as the tool
// API does: with the run's id and state (read only on this refusal).
func (b *llmBridge) errRunNotActive(ctx context.Context, runID string) error {
	e := &llmproxy.Error{Status: http.StatusConflict, Code: "run_not_active", Message: "run " + runID + " has already ended", RunID: runID}
	if r, err := b.st.RunGet(ctx, runID); err == nil {
		e.RunStatus = r.Status
		e.Message += " (it is " + r.Status + ")"
	}
	return e
}

// committed sees this process's commits: a run's terminal event marks it
// ended at once.
func (b *llmBridge) committed(evs []store.Event) {
	for i := range evs {
		if !eventlog.IsRunEnd(evs[i].Type) {
			continue
		}
		e := &evs[i]
		b.mu.Lock()
		b.epoch++
		if o, ok := b.runs[e.RunID]; ok {
			o.ended = true
			b.runs[e.RunID] = o
		}
		if set := b.active[e.SessionID]; set != nil {
			delete(set, e.RunID)
			if len(set) == 0 {
				delete(b.active, e.SessionID)
			}
		}
		b.mu.Unlock()
	}
}

// notified hears that other processes wrote to sessions (nil: any): their
// runs may have ended there, so their status is read again.
func (b *llmBridge) notified(sessionIDs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.epoch++
	if sessionIDs == nil {
		clear(b.active)
		return
	}
	for _, sid := range sessionIDs {
		delete(b.active, sid)
	}
}

// runStatus returns runID's owner and whether it has ended, from the cache
// when it is sure, else from the store.
func (b *llmBridge) runStatus(ctx context.Context, runID string) (runOwner, error) {
	b.mu.Lock()
	o, ok := b.runs[runID]
	sure := ok && (o.ended || b.active[o.sessionID][runID])
	epoch := b.epoch
	b.mu.Unlock()
	if sure {
		return o, nil
	}
	rn, err := b.st.RunGet(ctx, runID)
	if err != nil {
		return runOwner{}, err
	}
	o = runOwner{agentID: rn.AgentID, sessionID: rn.SessionID, parentRunID: rn.ParentRunID, ended: store.RunIsTerminal(rn.Status)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.runs) >= runCacheMax {
		b.runs = map[string]runOwner{}
		clear(b.active)
	}
	if cur, ok := b.runs[runID]; ok && cur.ended {
		o.ended = true // ended while we read
	}
	b.runs[runID] = o
	if !o.ended && b.epoch == epoch {
		set := b.active[o.sessionID]
		if set == nil {
			set = map[string]bool{}
			b.active[o.sessionID] = set
		}
		set[runID] = true
	}
	return o, nil
}

// authenticate is the proxy's Authenticator: an agent key, and when
// x-run-id is sent, an active run of that agent (and x-session-id, if sent,
// its session); a run that has ended is refused with 409 run_not_active.
// The run lookup is cached, its status until the run may have moved (see
// llmBridge.active), so the hot path rarely touches the database.
func (b *llmBridge) authenticate(r *http.Request) (llmproxy.Caller, error) {
	p, err := b.keys.Request(r)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthorized) {
			return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing or invalid agent API key"}
		}
		return llmproxy.Caller{}, err
	}
	if p.Kind != auth.Agent {
		return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "the LLM proxy takes agent keys"}
	}
	runID := r.Header.Get("x-run-id")
	if runID == "" {
		return llmproxy.Caller{AgentID: p.AgentID}, nil
	}
	o, err := b.runStatus(r.Context(), runID)
	if errors.Is(err, store.ErrNotFound) {
		return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "run " + runID + " is not this agent's"}
	}
	if err != nil {
		return llmproxy.Caller{}, err
	}
	if o.agentID != p.AgentID {
		return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "run " + runID + " is not this agent's"}
	}
	if sid := r.Header.Get("x-session-id"); sid != "" && sid != o.sessionID {
		return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "run " + runID + " is not in session " + sid}
	}
	if o.ended {
		// Nothing of a call may land after the run's terminal event.
		return llmproxy.Caller{}, b.errRunNotActive(r.Context(), runID)
	}
	c := llmproxy.Caller{AgentID: p.AgentID, RunID: runID, SessionID: o.sessionID}
	if b.invokeTraceparent != nil && !trace.SpanContextFromContext(r.Context()).IsValid() {
		// No traceparent the middleware could read (none, or a malformed
		// one): the call goes under the run's agent invoke.
		c.Traceparent = b.invokeTraceparent(runID)
	}
	return c, nil
}

// Record is the proxy's Recorder: it queues the event on the log's writer
// and returns; the writer commits it with its neighbours, and Stop flushes
// it on a clean shutdown. Calls outside a run go to the agent's own session.
func (b *llmBridge) Record(c llmproxy.Caller, eventType string, payload any) {
	var data []byte
	if d, ok := payload.(llmproxy.CallDone); ok {
		b.metrics.record(c.AgentID, &d)
		data = d.AppendJSON(make([]byte, 0, 512))
	} else {
		var err error
		if data, err = json.Marshal(payload); err != nil {
			b.lg.Error("llm event encode", "type", eventType, "err", err)
			return
		}
	}
	sid := c.SessionID
	if sid == "" {
		sid = run.AgentSessionID(c.AgentID)
		if err := b.ensureSession(sid); err != nil {
			b.lg.Error("llm event: agent session", "agent_id", c.AgentID, "err", err)
			return
		}
	}
	// A child run's calls carry its parent, like every event of the run
	// (the run was cached when the call was authenticated).
	parent := ""
	if c.RunID != "" {
		b.mu.Lock()
		parent = b.runs[c.RunID].parentRunID
		b.mu.Unlock()
	}
	err := b.log.AppendBehind(context.Background(), func(_ []store.Event, err error) {
		if err != nil {
			b.lg.Error("llm event not recorded", "type", eventType, "run_id", c.RunID, "session_id", sid, "err", err)
		}
	}, store.EventParams{SessionID: sid, RunID: c.RunID, ParentRunID: parent, TS: time.Now().UnixMilli(), Type: eventType, Payload: data})
	if err != nil {
		b.lg.Error("llm event not queued", "type", eventType, "run_id", c.RunID, "err", err)
	}
	if c.RunID != "" && eventType == llmproxy.EventCallDone {
		b.callEnded(c.RunID)
	}
}

// CallBegun counts a run's calls in flight from their admission (their
// llm_call_started may never be recorded: see llmproxy.Config.StartedEventAfter).
func (b *llmBridge) CallBegun(c llmproxy.Caller) {
	if c.RunID == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.inflight[c.RunID]
	if n == nil {
		n = &calls{}
		b.inflight[c.RunID] = n
	}
	n.n++
}

// callEnded uncounts a call. Its done event is already queued when the
// count drops, so anything the run writes afterwards on the same session
// commits after it.
func (b *llmBridge) callEnded(runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.inflight[runID]
	if n == nil {
		return
	}
	if n.n--; n.n == 0 {
		if n.idle != nil {
			close(n.idle)
		}
		delete(b.inflight, runID)
	}
}

// Quiesce waits until the run's LLM calls have been recorded, at most
// until ctx ends. The proxy records a call after relaying its last byte,
// so an agent can answer "done" first; waiting here keeps run_done's
// total_cost complete.
func (b *llmBridge) Quiesce(ctx context.Context, runID string) {
	b.mu.Lock()
	c := b.inflight[runID]
	var idle chan struct{}
	if c != nil {
		if c.idle == nil {
			c.idle = make(chan struct{})
		}
		idle = c.idle
	}
	b.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

func (b *llmBridge) ensureSession(sid string) error {
	b.mu.Lock()
	known := b.sessions[sid]
	b.mu.Unlock()
	if known {
		return nil
	}
	_, err := b.st.SessionCreate(context.Background(), &store.SessionCreateParams{SessionID: sid, UserID: "", CreatedAt: time.Now().UnixMilli()})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	b.mu.Lock()
	b.sessions[sid] = true
	b.mu.Unlock()
	return nil
}
