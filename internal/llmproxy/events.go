package llmproxy

import "net/http"

// Caller is who a proxied call is attributed to. RunID and SessionID are
// empty for calls an agent makes outside a run.
type Caller struct {
	AgentID, RunID, SessionID string
	// Traceparent, when set, parents the call's span if the request
	// carries no traceparent of its own (the run's agent invoke span).
	Traceparent string
}

// Authenticator resolves the agent key (Authorization: Bearer) and the
// x-run-id / x-session-id headers into a Caller. It returns an *Error for 401
// (missing or unknown key) and 403 (a run that is not the agent's); any other
// error is answered 500.
type Authenticator func(r *http.Request) (Caller, error)

// Recorder receives trace events. Record must not block the proxied call:
// enqueue and write behind. The payload is a CallStarted or a CallDone value.
// A call always gets exactly one CallDone; its CallStarted comes first, and
// only when the call is still running after Config.StartedEventAfter.
type Recorder interface {
	Record(c Caller, eventType string, payload any)
}

// CallBeginner is implemented by a Recorder that needs to know of every
// call as soon as it is admitted, whether or not its CallStarted is ever
// recorded (e.g. to wait for a run's calls to be recorded before the run
// ends). CallBegun is followed by exactly one Record of a CallDone.
type CallBeginner interface {
	CallBegun(c Caller)
}

// Event types passed to Recorder.Record.
const (
	EventCallStarted = "llm_call_started"
	EventCallDone    = "llm_call_done"
)

// Endpoint names as recorded in events.
const (
	EndpointChat       = "chat.completions"
	EndpointResponses  = "responses"
	EndpointEmbeddings = "embeddings"
)

// Call outcomes recorded in CallDone.Outcome.
const (
	OutcomeOK        = "ok"
	OutcomeError     = "error"
	OutcomeCancelled = "cancelled"
	OutcomeTimeout   = "timeout"
)

// CallStarted is the payload of llm_call_started, recorded for a call still
// running after Config.StartedEventAfter (at once when that is negative).
type CallStarted struct {
	CallID   string `json:"call_id"`
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
	Stream   bool   `json:"stream"`
}

// CallDone is the payload of llm_call_done, recorded once per call whatever
// its outcome.
type CallDone struct {
	CallID string `json:"call_id"`
	// StartedAt is when the request reached the proxy, in Unix
	// milliseconds: the start of a call whose llm_call_started was not
	// recorded.
	StartedAt int64 `json:"started_at"`
	// Model is the model the client asked for; UpstreamModel the one sent
	// upstream when the route rewrote it.
	Model         string `json:"model"`
	UpstreamModel string `json:"upstream_model,omitempty"`
	Endpoint      string `json:"endpoint"`
	Stream        bool   `json:"stream"`
	// Status is the HTTP status the client got: the upstream's, or the
	// proxy's own (499 when the client went away before any answer, 504 on
	// a timeout before the first byte).
	Status   int    `json:"status"`
	Outcome  string `json:"outcome"`
	Upstream string `json:"upstream,omitempty"`
	Attempts int    `json:"attempts"`
	// LatencyMS is from the request reaching the proxy to the last byte of
	// the answer; TTFTMS to the first byte of the upstream's response body
	// (the first SSE event of a stream). Both in milliseconds, µs precision.
	LatencyMS float64 `json:"latency_ms"`
	TTFTMS    float64 `json:"ttft_ms"`
	// ProxyOverheadMS is the latency the proxy itself added before the
	// first upstream request left: authentication, admission, reading and
	// checking the body, routing (0 when no request went upstream).
	ProxyOverheadMS  float64 `json:"proxy_overhead_ms,omitempty"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	// EstimatedCost is in the price table's currency; 0 when the model has
	// no price (then Price is nil).
	EstimatedCost float64 `json:"estimated_cost"`
	Price         *Price  `json:"price"`
	// Partial says the token counts are incomplete: the call failed, timed
	// out or was cancelled before the upstream reported usage.
	Partial bool `json:"partial"`
	// Chunks is the number of SSE events the upstream sent (0 for a call
	// that did not stream).
	Chunks int        `json:"chunks"`
	Error  *CallError `json:"error,omitempty"`
}

// CallError says why a call did not end "ok".
type CallError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
