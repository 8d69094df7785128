package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/llmproxy"
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
}

// calls counts a run's unfinished LLM calls; idle is closed when it drops
// to zero.
type calls struct {
	n    int
	idle chan struct{}
}

type runOwner struct{ agentID, sessionID string }

// runCacheMax bounds the run cache; it is simply reset when full.
const runCacheMax = 100_000

func newLLMBridge(keys *auth.Keys, st store.Store, log *eventlog.Log, lg *slog.Logger) *llmBridge {
	return &llmBridge{keys: keys, st: st, log: log, lg: lg, runs: map[string]runOwner{}, sessions: map[string]bool{}, inflight: map[string]*calls{}}
}

// authenticate is the proxy's Authenticator: an agent key, and when
// x-run-id is sent, a run of that agent (and x-session-id, if sent, its
// session). The run lookup is cached so the hot path rarely touches the
// database.
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
	b.mu.Lock()
	o, ok := b.runs[runID]
	b.mu.Unlock()
	if !ok {
		rn, err := b.st.RunGet(r.Context(), runID)
		if errors.Is(err, store.ErrNotFound) {
			return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "run " + runID + " is not this agent's"}
		}
		if err != nil {
			return llmproxy.Caller{}, err
		}
		o = runOwner{agentID: rn.AgentID, sessionID: rn.SessionID}
		b.mu.Lock()
		if len(b.runs) >= runCacheMax {
			b.runs = map[string]runOwner{}
		}
		b.runs[runID] = o
		b.mu.Unlock()
	}
	if o.agentID != p.AgentID {
		return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "run " + runID + " is not this agent's"}
	}
	if sid := r.Header.Get("x-session-id"); sid != "" && sid != o.sessionID {
		return llmproxy.Caller{}, &llmproxy.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "run " + runID + " is not in session " + sid}
	}
	return llmproxy.Caller{AgentID: p.AgentID, RunID: runID, SessionID: o.sessionID}, nil
}

// Record is the proxy's Recorder: it queues the event on the log's writer
// and returns; the writer commits it with its neighbours, and Stop flushes
// it on a clean shutdown. Calls outside a run go to the agent's own session.
func (b *llmBridge) Record(c llmproxy.Caller, eventType string, payload any) {
	data, err := json.Marshal(payload)
	if err != nil {
		b.lg.Error("llm event encode", "type", eventType, "err", err)
		return
	}
	sid := c.SessionID
	if sid == "" {
		sid = run.AgentSessionID(c.AgentID)
		if err := b.ensureSession(sid); err != nil {
			b.lg.Error("llm event: agent session", "agent_id", c.AgentID, "err", err)
			return
		}
	}
	err = b.log.AppendAsync(context.Background(), func(_ []store.Event, err error) {
		if err != nil {
			b.lg.Error("llm event not recorded", "type", eventType, "run_id", c.RunID, "session_id", sid, "err", err)
		}
	}, store.EventParams{SessionID: sid, RunID: c.RunID, TS: time.Now().UnixMilli(), Type: eventType, Payload: data})
	if err != nil {
		b.lg.Error("llm event not queued", "type", eventType, "run_id", c.RunID, "err", err)
	}
	if c.RunID != "" {
		b.track(c.RunID, eventType)
	}
}

// track counts a run's calls in flight. The done event is already queued
// when the count drops, so anything the run writes afterwards on the same
// session commits after it.
func (b *llmBridge) track(runID, eventType string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.inflight[runID]
	switch eventType {
	case llmproxy.EventCallStarted:
		if c == nil {
			c = &calls{idle: make(chan struct{})}
			b.inflight[runID] = c
		}
		c.n++
	case llmproxy.EventCallDone:
		if c == nil {
			return
		}
		if c.n--; c.n == 0 {
			close(c.idle)
			delete(b.inflight, runID)
		}
	}
}

// Quiesce waits until the run's LLM calls have been recorded, at most
// until ctx ends. The proxy records a call after relaying its last byte,
// so an agent can answer "done" first; waiting here keeps run_done's
// total_cost complete.
func (b *llmBridge) Quiesce(ctx context.Context, runID string) {
	b.mu.Lock()
	c := b.inflight[runID]
	b.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case <-c.idle:
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
