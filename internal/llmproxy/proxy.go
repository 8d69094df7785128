// Package llmproxy is agentplane's OpenAI-compatible LLM proxy: agents point
// any OpenAI SDK at it and it forwards each call to the configured upstream,
// streaming the answer back event by event while it meters tokens and cost
// and records llm_call_started / llm_call_done trace events.
//
// Bodies pass through byte for byte with three exceptions: the model name is
// rewritten when a route strips its prefix, streaming chat completions get
// stream_options.include_usage turned on upstream (and the extra usage chunk
// is removed again when the client did not ask for it), and upstream
// responses are requested uncompressed so they can be metered.
//
// The hot path never decodes a whole body: it scans for the few members it
// needs (see jsonscan.go) and decodes only the usage object, once per call.
package llmproxy

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
)

// Proxy is the LLM proxy. Create it with New, mount it with Routes, and stop
// it with Close.
type Proxy struct {
	cfg    Config
	auth   Authenticator
	rec    Recorder
	rt     *router
	tr     *http.Transport
	lim    *limiter
	prices map[string]Price

	// newID makes call ids; replaced in tests only when ids must be known.
	newID func() string

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// endpoint is one metered OpenAI endpoint.
type endpoint struct {
	name   string // as recorded: "chat.completions"
	suffix string // appended to the upstream base URL
	chat   bool   // streaming needs include_usage injected
}

var (
	epChat       = &endpoint{name: EndpointChat, suffix: "/chat/completions", chat: true}
	epResponses  = &endpoint{name: EndpointResponses, suffix: "/responses"}
	epEmbeddings = &endpoint{name: EndpointEmbeddings, suffix: "/embeddings"}
)

// New returns a proxy for cfg. auth is required; rec may be nil (nothing is
// recorded). A Config without upstreams is valid: the proxy then answers 503
// llm_not_configured to authenticated callers.
func New(cfg Config, auth Authenticator, rec Recorder) (*Proxy, error) {
	if auth == nil {
		return nil, errors.New("llmproxy: an Authenticator is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rt, err := newRouter(cfg)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		rec = nopRecorder{}
	}
	p := &Proxy{
		cfg:    cfg,
		auth:   auth,
		rec:    rec,
		rt:     rt,
		tr:     newTransport(cfg.Timeouts),
		lim:    newLimiter(cfg.Limits),
		prices: cfg.Prices,
		newID:  func() string { return ids.New("llm") },
		stop:   make(chan struct{}),
	}
	if p.lim != nil {
		p.wg.Add(1)
		go p.sweepLimits()
	}
	return p, nil
}

// Routes registers the proxy's endpoints on mux. They must not sit behind a
// server-wide WriteTimeout: a stream lasts as long as the generation.
func (p *Proxy) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { p.serveCall(w, r, epChat) })
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { p.serveCall(w, r, epResponses) })
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) { p.serveCall(w, r, epEmbeddings) })
	mux.HandleFunc("GET /v1/models", p.serveModels)
}

// Close stops background work and closes idle upstream connections. Calls in
// flight finish normally. Close may be called more than once.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		close(p.stop)
		p.wg.Wait()
		p.tr.CloseIdleConnections()
	})
}

func (p *Proxy) sweepLimits() {
	defer p.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.lim.sweep(now)
		}
	}
}

// priceFor looks model up as the client named it, then as sent upstream.
func (p *Proxy) priceFor(model, upstreamModel string) (Price, bool) {
	if pr, ok := p.prices[model]; ok {
		return pr.effective(), true
	}
	if pr, ok := p.prices[upstreamModel]; ok {
		return pr.effective(), true
	}
	return Price{}, false
}

type nopRecorder struct{}

func (nopRecorder) Record(Caller, string, any) {}

var errNotConfigured = &Error{Status: http.StatusServiceUnavailable, Code: CodeNotConfigured,
	Message: "no LLM upstream is configured (set AGENTPLANE_LLM_BASE_URL or llm.upstreams)"}
