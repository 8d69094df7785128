package llmproxy

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config is the proxy's configuration. It is the `llm:` section of the
// config file (YAML; durations are strings such as "30s"). The zero Config is
// valid: it has no upstream, so every call is answered 503
// llm_not_configured.
//
//	llm:
//	  upstreams:
//	    - name: openai
//	      base_url: https://api.openai.com/v1
//	      api_key: sk-...
//	      prefixes: ["openai/", "gpt-"]
//	      strip_prefix: true        # "openai/gpt-4o" is sent upstream as "gpt-4o"
//	    - name: local
//	      base_url: http://127.0.0.1:8000/v1
//	      prefixes: ["local/"]
//	      strip_prefix: true
//	  fallback: [openai, local]     # tried in order after the routed upstream fails before the first byte
//	  max_attempts: 3
//	  retry_after_cap: 2s
//	  prices:                       # per 1M tokens
//	    openai/gpt-4o: {input: 2.5, cached_input: 1.25, output: 10}
//	  timeouts: {connect: 10s, first_byte: 10m, idle: 5m, total: 30m}
//	  limits: {requests_per_second: 20, burst: 40, tokens_per_minute: 200000, max_request_bytes: 16777216}
type Config struct {
	// Upstreams are the OpenAI-compatible APIs calls are routed to.
	Upstreams []Upstream `yaml:"upstreams" json:"upstreams"`
	// Fallback names upstreams, in order, to try when the routed one fails
	// with a connection error, 429 or 5xx before the first byte reached the
	// client.
	Fallback []string `yaml:"fallback" json:"fallback"`
	// MaxAttempts bounds the upstream requests made for one call; default 3.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// RetryAfterCap is the longest Retry-After the proxy waits out before
	// retrying an upstream that has no untried alternative; a longer one is
	// passed through to the client. Default 2s; negative means never wait.
	RetryAfterCap time.Duration `yaml:"retry_after_cap" json:"retry_after_cap"`
	// Prices by model name, as the client sends it ("openai/gpt-4o") or as it
	// is sent upstream ("gpt-4o"); the former wins.
	Prices   map[string]Price `yaml:"prices" json:"prices"`
	Timeouts Timeouts         `yaml:"timeouts" json:"timeouts"`
	Limits   Limits           `yaml:"limits" json:"limits"`
	// StartedEventAfter is how long a call runs before llm_call_started is
	// recorded for it. A call that ends sooner is recorded by its
	// llm_call_done alone, which carries started_at: the start event exists
	// so that observers (the console's live view) see a call in progress,
	// and a call shorter than this is not worth a second event — half the
	// event-log work of a fast call (issue 13). Default 200ms; negative
	// records every start at once.
	StartedEventAfter time.Duration `yaml:"started_event_after" json:"started_event_after"`
}

// Upstream is one OpenAI-compatible API.
type Upstream struct {
	// Name identifies the upstream in fallback lists and trace events.
	Name string `yaml:"name" json:"name"`
	// BaseURL is the API root including the version, e.g. "https://api.openai.com/v1";
	// the proxy appends "/chat/completions" and so on.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// APIKey is sent as "Authorization: Bearer"; empty sends none.
	APIKey string `yaml:"api_key" json:"api_key"`
	// Prefixes route models to this upstream: the longest prefix matching the
	// requested model wins. An upstream without prefixes takes every model no
	// prefix matches (the first such upstream does).
	Prefixes []string `yaml:"prefixes" json:"prefixes"`
	// StripPrefix removes the matched prefix from the model sent upstream.
	// Only prefixes ending in "/" are stripped ("gpt-" must stay in "gpt-4o").
	StripPrefix bool `yaml:"strip_prefix" json:"strip_prefix"`
}

// Timeouts are per call. Zero means the default.
type Timeouts struct {
	// Connect bounds dialing and the TLS handshake with an upstream; default 10s.
	Connect time.Duration `yaml:"connect" json:"connect"`
	// FirstByte bounds the wait from sending the request to the first byte of
	// the response body (for a non-streaming call that is the whole
	// generation); default 10m.
	FirstByte time.Duration `yaml:"first_byte" json:"first_byte"`
	// Idle bounds the silence between two reads of the response body, i.e.
	// between stream chunks; default 5m.
	Idle time.Duration `yaml:"idle" json:"idle"`
	// Total bounds the whole call, retries included; default 30m.
	Total time.Duration `yaml:"total" json:"total"`
}

// Limits are per agent. Zero means unlimited, except MaxRequestBytes.
type Limits struct {
	// RequestsPerSecond is the sustained request rate an agent may use.
	RequestsPerSecond float64 `yaml:"requests_per_second" json:"requests_per_second"`
	// Burst is how many requests may arrive at once; default
	// max(1, ceil(RequestsPerSecond)).
	Burst int `yaml:"burst" json:"burst"`
	// TokensPerMinute caps the tokens (prompt + completion, as the upstream
	// reports them) an agent may use. A call is admitted while the agent's
	// budget is positive; its usage is charged when it ends.
	TokensPerMinute int64 `yaml:"tokens_per_minute" json:"tokens_per_minute"`
	// MaxRequestBytes is the largest request body accepted (413
	// request_too_large beyond it); default 16 MiB.
	MaxRequestBytes int64 `yaml:"max_request_bytes" json:"max_request_bytes"`
}

// Defaults used for zero Config fields.
const (
	DefaultMaxAttempts     = 3
	DefaultRetryAfterCap   = 2 * time.Second
	DefaultConnectTimeout  = 10 * time.Second
	DefaultFirstByte       = 10 * time.Minute
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultTotalTimeout    = 30 * time.Minute
	DefaultMaxRequestBytes = 16 << 20
	// DefaultStartedEventAfter: see Config.StartedEventAfter.
	DefaultStartedEventAfter = 200 * time.Millisecond
)

// ConfigFromEnv is the Config of the AGENTPLANE_LLM_BASE_URL and
// AGENTPLANE_LLM_API_KEY variables: one upstream named "default" that takes
// every model, or no upstream at all when baseURL is empty. Values from the
// config file (prices, limits, timeouts) can be set on the result.
func ConfigFromEnv(baseURL, apiKey string) Config {
	if strings.TrimSpace(baseURL) == "" {
		return Config{}
	}
	return Config{Upstreams: []Upstream{{Name: "default", BaseURL: strings.TrimSpace(baseURL), APIKey: apiKey}}}
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryAfterCap == 0 {
		c.RetryAfterCap = DefaultRetryAfterCap
	}
	t := &c.Timeouts
	if t.Connect <= 0 {
		t.Connect = DefaultConnectTimeout
	}
	if t.FirstByte <= 0 {
		t.FirstByte = DefaultFirstByte
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	if t.Total <= 0 {
		t.Total = DefaultTotalTimeout
	}
	if c.StartedEventAfter == 0 {
		c.StartedEventAfter = DefaultStartedEventAfter
	}
	l := &c.Limits
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if l.RequestsPerSecond > 0 && l.Burst <= 0 {
		l.Burst = max(1, int(l.RequestsPerSecond+0.999999))
	}
	return c
}

// Validate reports the first problem in c.
func (c Config) Validate() error {
	names := map[string]bool{}
	for i, u := range c.Upstreams {
		if u.Name == "" {
			return fmt.Errorf("llm.upstreams[%d]: name is required", i)
		}
		if names[u.Name] {
			return fmt.Errorf("llm.upstreams[%d]: duplicate name %q", i, u.Name)
		}
		names[u.Name] = true
		p, err := url.Parse(u.BaseURL)
		if err != nil {
			return fmt.Errorf("llm.upstreams[%d] (%s): base_url: %w", i, u.Name, err)
		}
		if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("llm.upstreams[%d] (%s): base_url %q must be an absolute http(s) URL", i, u.Name, u.BaseURL)
		}
		for _, pre := range u.Prefixes {
			if pre == "" {
				return fmt.Errorf("llm.upstreams[%d] (%s): empty prefix", i, u.Name)
			}
		}
	}
	for _, f := range c.Fallback {
		if !names[f] {
			return fmt.Errorf("llm.fallback: unknown upstream %q", f)
		}
	}
	for m, p := range c.Prices {
		if p.Input < 0 || p.CachedInput < 0 || p.Output < 0 {
			return fmt.Errorf("llm.prices[%q]: prices must not be negative", m)
		}
	}
	if c.Limits.RequestsPerSecond < 0 || c.Limits.TokensPerMinute < 0 || c.Limits.Burst < 0 {
		return fmt.Errorf("llm.limits: limits must not be negative")
	}
	return nil
}
