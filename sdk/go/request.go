package agentplane

import "net/http"

// Message is one chat message: the input of a run, or a transcript entry as
// the platform sends it to the agent.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one invocation of the agent, decoded from the platform's
// POST /invoke (DESIGN §5).
type Request struct {
	AgentID   string
	SessionID string
	RunID     string
	// ParentRunID is set when another agent invoked this one; "" for a root run.
	ParentRunID string
	// Depth is 0 for a root run and the caller's depth plus one for a child.
	Depth int
	// UserID is context.user_id: the end user the run is for.
	UserID string
	// Traceparent is the W3C trace context header, "" if absent.
	Traceparent string
	// InputMessage is this run's input.
	InputMessage Message
	// Messages is the transcript the platform chose to send, oldest first.
	Messages []Message
	// IntentionID is the user intention this run belongs to (DESIGN §12);
	// ResumesRunID, when set, is the run whose question (InputRequired)
	// this run's input answers.
	IntentionID  string
	ResumesRunID string
	// Context is the body's context object as sent (user_id and any later fields).
	Context map[string]any
	// Header holds the request's HTTP headers.
	Header http.Header

	client *Client
}

// invokeBody is the wire form of POST /invoke.
type invokeBody struct {
	AgentID      string         `json:"agent_id"`
	SessionID    string         `json:"session_id"`
	RunID        string         `json:"run_id"`
	ParentRunID  string         `json:"parent_run_id"`
	Depth        int            `json:"depth"`
	InputMessage Message        `json:"input_message"`
	Messages     []Message      `json:"messages"`
	Context      map[string]any `json:"context"`
	IntentionID  string         `json:"intention_id"`
	ResumesRunID string         `json:"resumes_run_id"`
}

func newRequest(b *invokeBody, h http.Header, platform *Client) *Request {
	r := &Request{
		AgentID:      b.AgentID,
		SessionID:    b.SessionID,
		RunID:        b.RunID,
		ParentRunID:  b.ParentRunID,
		Depth:        b.Depth,
		InputMessage: b.InputMessage,
		Messages:     b.Messages,
		Context:      b.Context,
		IntentionID:  b.IntentionID,
		ResumesRunID: b.ResumesRunID,
		Header:       h,
		Traceparent:  h.Get("traceparent"),
	}
	// The body is the contract; the headers are a fallback that keeps a
	// hand-written curl call attributable.
	if r.SessionID == "" {
		r.SessionID = h.Get("x-session-id")
	}
	if r.RunID == "" {
		r.RunID = h.Get("x-run-id")
	}
	if r.Context == nil {
		r.Context = map[string]any{}
	}
	r.UserID, _ = r.Context["user_id"].(string)
	if platform != nil {
		c := platform.WithRun(r.RunID, r.SessionID)
		c.AgentID = r.AgentID
		c.Traceparent = r.Traceparent
		r.client = c
	}
	return r
}

// Client returns a platform client bound to this run (its calls carry
// x-run-id and x-session-id), or nil when the AgentHandler has no Platform
// client configured (AGENTPLANE_URL or AGENTPLANE_AGENT_KEY unset); the
// methods of that nil client return ErrNotConfigured, which says what to set.
func (r *Request) Client() *Client { return r.client }

// OpenAIBaseURL is the base URL for an OpenAI-compatible SDK: the platform's
// LLM proxy, "{platform}/v1". It is "" when no platform is configured.
func (r *Request) OpenAIBaseURL() string {
	if r.client == nil {
		return ""
	}
	return r.client.OpenAIBaseURL()
}

// OpenAIAPIKey is the API key for an OpenAI-compatible SDK: this agent's
// key. It is "" when no platform is configured.
func (r *Request) OpenAIAPIKey() string {
	if r.client == nil {
		return ""
	}
	return r.client.APIKey
}

// OpenAIHeaders are the extra headers an OpenAI-compatible SDK must send so
// the platform attributes each LLM call to this run: x-run-id and
// x-session-id, and traceparent (the one the agent was invoked with) so the
// call's span joins the run's trace.
func (r *Request) OpenAIHeaders() map[string]string {
	h := attribution(r.RunID, r.SessionID)
	if r.Traceparent != "" {
		h["traceparent"] = r.Traceparent
	}
	return h
}

func attribution(runID, sessionID string) map[string]string {
	h := make(map[string]string, 2)
	if runID != "" {
		h["x-run-id"] = runID
	}
	if sessionID != "" {
		h["x-session-id"] = sessionID
	}
	return h
}
