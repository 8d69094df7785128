package agentplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables read when no explicit value is given.
const (
	// EnvURL names the platform's base URL, e.g. http://127.0.0.1:8080.
	EnvURL = "AGENTPLANE_URL"
	// EnvAgentKey holds this agent's API key, issued by registration.
	EnvAgentKey = "AGENTPLANE_AGENT_KEY"
)

const userAgent = "agentplane-go/0.1"

// maxResponseBytes bounds what a platform answer may make us buffer.
const maxResponseBytes = 64 << 20

// Client calls the platform's agent-facing API (DESIGN §6). Every call sends
// "Authorization: Bearer APIKey" plus x-run-id and x-session-id when RunID
// and SessionID are set, so the platform can attribute it to a run (it
// refuses run ids that are not this agent's). Inside a handler use
// Request.Client, which is already bound to the run.
//
// Non-2xx answers are returned as *APIError. A Client may be copied; its
// methods are safe for concurrent use.
type Client struct {
	// BaseURL is the platform's base URL, e.g. http://127.0.0.1:8080.
	BaseURL string
	// APIKey is this agent's key (not the admin key).
	APIKey string
	// AgentID is the agent Heartbeat reports for when given "".
	AgentID string
	// RunID and SessionID attribute calls to a run; "" sends no header.
	RunID     string
	SessionID string
	// Traceparent is the W3C trace context sent with every call (also to
	// the LLM proxy through OpenAIHeaders), so the platform's spans of the
	// agent's LLM and tool calls join the run's trace; "" sends none.
	// Request.Client sets it to the traceparent the agent was invoked
	// with; an agent with its own OpenTelemetry spans sets its span's
	// (WithTraceparent) so the platform's spans become its children.
	Traceparent string
	// HTTPClient sends the requests. nil means http.DefaultClient.
	HTTPClient *http.Client
}

// NewClient returns a Client for the platform at baseURL authenticating with
// apiKey; an empty argument is taken from AGENTPLANE_URL or
// AGENTPLANE_AGENT_KEY.
func NewClient(baseURL, apiKey string) *Client {
	if baseURL == "" {
		baseURL = os.Getenv(EnvURL)
	}
	if apiKey == "" {
		apiKey = os.Getenv(EnvAgentKey)
	}
	return &Client{BaseURL: baseURL, APIKey: apiKey}
}

// clientFromEnv is NewClient("", "") when both AGENTPLANE_URL and
// AGENTPLANE_AGENT_KEY are set, else nil: a client without the key would
// only collect 401s, where a nil one returns ErrNotConfigured, which says
// what to set (as the Python SDK's req.client does).
func clientFromEnv() *Client {
	if os.Getenv(EnvURL) == "" || os.Getenv(EnvAgentKey) == "" {
		return nil
	}
	return NewClient("", "")
}

// WithRun returns a copy of c attributed to runID and sessionID.
func (c *Client) WithRun(runID, sessionID string) *Client {
	cp := *c
	cp.RunID, cp.SessionID = runID, sessionID
	return &cp
}

// WithTraceparent returns a copy of c that sends traceparent tp.
func (c *Client) WithTraceparent(tp string) *Client {
	cp := *c
	cp.Traceparent = tp
	return &cp
}

// OpenAIBaseURL is the base URL of the platform's OpenAI-compatible LLM
// proxy, "{BaseURL}/v1".
func (c *Client) OpenAIBaseURL() string { return strings.TrimRight(c.BaseURL, "/") + "/v1" }

// OpenAIHeaders are the headers an OpenAI-compatible SDK must add so the
// platform attributes its calls: x-run-id, x-session-id and traceparent
// (those that are set).
func (c *Client) OpenAIHeaders() map[string]string { return c.attribution() }

func (c *Client) attribution() map[string]string {
	h := attribution(c.RunID, c.SessionID)
	if c.Traceparent != "" {
		h["traceparent"] = c.Traceparent
	}
	return h
}

// Heartbeat tells the platform the agent is alive. agentID "" means c.AgentID.
func (c *Client) Heartbeat(ctx context.Context, agentID string) error {
	if c == nil {
		return ErrNotConfigured
	}
	if agentID == "" {
		agentID = c.AgentID
	}
	if agentID == "" {
		return errors.New("agentplane: heartbeat: no agent id")
	}
	return c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(agentID)+":heartbeat", nil, struct{}{}, nil)
}

// StoredMessage is a transcript entry as the platform stores it.
type StoredMessage struct {
	MessageID string `json:"message_id"`
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	// AgentID is the agent of the run the message belongs to; with
	// ParentRunID (set on a child run's rows, DESIGN §11) it tells a
	// caller's rows from its children's in the shared session.
	AgentID     string `json:"agent_id,omitempty"`
	ParentRunID string `json:"parent_run_id,omitempty"`
	// IntentionID is the user intention of the message's run (DESIGN §12).
	IntentionID string `json:"intention_id,omitempty"`
	Role        string `json:"role"`
	Content     string `json:"content"`
	// CreatedAt is the platform's timestamp (Unix milliseconds).
	CreatedAt int64 `json:"created_at"`
}

// MessagePage is one page of a transcript, oldest first. NextBefore, passed
// as Messages' before, fetches the page before this one; "" means none.
type MessagePage struct {
	Messages   []StoredMessage `json:"messages"`
	NextBefore string          `json:"next_before"`
}

// Messages returns the newest limit messages of a session (older than the
// message id before, when set), oldest first. sessionID "" means
// c.SessionID; limit 0 leaves the page size to the platform.
func (c *Client) Messages(ctx context.Context, sessionID string, limit int, before string) (*MessagePage, error) {
	sid, err := c.session(sessionID)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before != "" {
		q.Set("before", before)
	}
	var page MessagePage
	if err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(sid)+"/messages", q, nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Transcript returns a session's whole transcript, oldest first, paging
// through Messages. sessionID "" means c.SessionID.
func (c *Client) Transcript(ctx context.Context, sessionID string) ([]StoredMessage, error) {
	var pages [][]StoredMessage
	before := ""
	for {
		page, err := c.Messages(ctx, sessionID, 100, before)
		if err != nil {
			return nil, err
		}
		pages = append(pages, page.Messages)
		// Stop on an empty page or a cursor that does not move, so a
		// misbehaving server cannot loop us forever.
		if len(page.Messages) == 0 || page.NextBefore == "" || page.NextBefore == before {
			break
		}
		before = page.NextBefore
	}
	var out []StoredMessage
	for i := len(pages) - 1; i >= 0; i-- {
		out = append(out, pages[i]...)
	}
	return out, nil
}

// AppendMessage appends m to a session's transcript and returns the stored
// message. sessionID "" means c.SessionID.
func (c *Client) AppendMessage(ctx context.Context, sessionID string, m Message) (*StoredMessage, error) {
	sid, err := c.session(sessionID)
	if err != nil {
		return nil, err
	}
	var out StoredMessage
	if err := c.do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(sid)+"/messages", nil, m, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ContextEntry is one version of a context blob. Data is empty in the answer
// to a put.
type ContextEntry struct {
	Key     string          `json:"key"`
	Version int64           `json:"version"`
	Data    json.RawMessage `json:"data,omitempty"`
	// CreatedAt is the platform's timestamp (Unix milliseconds).
	CreatedAt int64 `json:"created_at"`
}

type contextPutBody struct {
	Data      any    `json:"data"`
	IfVersion *int64 `json:"if_version,omitempty"`
}

// ContextPut stores data (marshalled as JSON; a json.RawMessage is sent as
// is) as the next version of key.
func (c *Client) ContextPut(ctx context.Context, key string, data any) (*ContextEntry, error) {
	return c.contextPut(ctx, key, contextPutBody{Data: data})
}

// ContextPutIfVersion is ContextPut that succeeds only if the latest version
// of key is ifVersion (0: key must not exist yet). On a mismatch the
// platform answers 409, returned as an *APIError with Status 409.
func (c *Client) ContextPutIfVersion(ctx context.Context, key string, data any, ifVersion int64) (*ContextEntry, error) {
	return c.contextPut(ctx, key, contextPutBody{Data: data, IfVersion: &ifVersion})
}

func (c *Client) contextPut(ctx context.Context, key string, body contextPutBody) (*ContextEntry, error) {
	var out ContextEntry
	if err := c.do(ctx, http.MethodPut, "/v1/context/"+url.PathEscape(key), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ContextGet reads version of key; version 0 means the latest.
func (c *Client) ContextGet(ctx context.Context, key string, version int64) (*ContextEntry, error) {
	q := url.Values{}
	if version > 0 {
		q.Set("version", strconv.FormatInt(version, 10))
	}
	var out ContextEntry
	if err := c.do(ctx, http.MethodGet, "/v1/context/"+url.PathEscape(key), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RegisterParams describes an agent to register (or update).
type RegisterParams struct {
	AgentID string
	Name    string
	// Endpoint is the agent's base URL; the platform calls {Endpoint}/invoke.
	Endpoint     string
	Capabilities []string
	// LinkedAgents are the agents this one may call (Agents().Invoke or the
	// call_<agent_id> tools).
	LinkedAgents []string
	// Description says what the agent does; models see it with its
	// call_<agent_id> tool.
	Description string
	// SubAgentEcho is how the agent's output reaches the session's clients
	// when it runs as a child: "aggregate" (the platform's default when
	// ""), "passthrough" or "off".
	SubAgentEcho string
	// RotateKey asks for a new key when AgentID is already registered.
	RotateKey bool
	// A2A also serves the agent as an A2A agent at /a2a/{agent_id}
	// (DESIGN §12).
	A2A bool
	// Protocol is how the platform speaks to the agent: "" or "agentplane"
	// (POST {Endpoint}/invoke), or "a2a": a remote A2A agent whose Endpoint
	// is its card URL or base URL.
	Protocol string
	// HTTPClient sends the request. nil means http.DefaultClient.
	HTTPClient *http.Client
}

// RegisterResult is the platform's answer to a registration.
type RegisterResult struct {
	OK      bool   `json:"ok"`
	AgentID string `json:"agent_id"`
	// AgentAPIKey is set only on the first registration of AgentID or with
	// RotateKey. Keep it: the platform stores only a hash.
	AgentAPIKey string `json:"agent_api_key,omitempty"`
}

type registerBody struct {
	AgentID      string   `json:"agent_id"`
	Name         string   `json:"name"`
	Endpoint     string   `json:"endpoint"`
	Capabilities []string `json:"capabilities"`
	LinkedAgents []string `json:"linked_agents,omitempty"`
	Description  string   `json:"description,omitempty"`
	SubAgentEcho string   `json:"sub_agent_echo,omitempty"`
	RotateKey    bool     `json:"rotate_key,omitempty"`
	A2A          bool     `json:"a2a,omitempty"`
	Protocol     string   `json:"protocol,omitempty"`
}

// Register registers an agent with the platform at baseURL ("" means
// AGENTPLANE_URL), authenticating with the platform's admin key.
func Register(ctx context.Context, baseURL, adminKey string, p RegisterParams) (*RegisterResult, error) {
	admin := NewClient(baseURL, adminKey)
	admin.HTTPClient = p.HTTPClient
	caps := p.Capabilities
	if caps == nil {
		caps = []string{} // the platform expects an array, not null
	}
	body := registerBody{AgentID: p.AgentID, Name: p.Name, Endpoint: p.Endpoint, Capabilities: caps, LinkedAgents: p.LinkedAgents,
		Description: p.Description, SubAgentEcho: p.SubAgentEcho, RotateKey: p.RotateKey, A2A: p.A2A, Protocol: p.Protocol}
	var out RegisterResult
	if err := admin.do(ctx, http.MethodPost, "/v1/agents/register", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) session(sessionID string) (string, error) {
	if c == nil {
		return "", ErrNotConfigured
	}
	if sessionID == "" {
		sessionID = c.SessionID
	}
	if sessionID == "" {
		return "", errors.New("agentplane: no session id")
	}
	return sessionID, nil
}

// do sends one JSON request to path (already escaped) and decodes the answer
// into out (if non-nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	if c == nil {
		return ErrNotConfigured
	}
	if c.BaseURL == "" {
		return fmt.Errorf("agentplane: no platform URL (set %s)", EnvURL)
	}
	u := strings.TrimRight(c.BaseURL, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("agentplane: %s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("agentplane: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
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
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("agentplane: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("agentplane: %s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return apiError(resp.StatusCode, resp.Header, raw)
	}
	if out == nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("agentplane: %s %s: decode response: %w", method, path, err)
	}
	return nil
}

func apiError(status int, header http.Header, raw []byte) *APIError {
	var body struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			// any, not a number type: a proxy's odd value must not cost
			// the error its code.
			RetryAfter   any `json:"retry_after"`
			RetryAfterMS any `json:"retry_after_ms"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil && body.Error.Code != "" {
		e := body.Error
		ae := &APIError{Status: status, Code: e.Code, Message: e.Message}
		if ms, ok := e.RetryAfterMS.(float64); ok && ms >= 0 {
			ae.RetryAfter = time.Duration(ms * float64(time.Millisecond))
		} else if sec, ok := e.RetryAfter.(float64); ok && sec >= 0 {
			ae.RetryAfter = time.Duration(sec * float64(time.Second))
		} else {
			ae.RetryAfter = retryAfterHeader(header)
		}
		return ae
	}
	text := strings.TrimSpace(string(raw))
	if len(text) > 500 {
		text = text[:500]
	}
	return &APIError{Status: status, Code: "http_" + strconv.Itoa(status), Message: text, RetryAfter: retryAfterHeader(header)}
}

// retryAfterHeader is a Retry-After header's delay-seconds; 0 when absent or
// an HTTP date (which the platform does not send).
func retryAfterHeader(h http.Header) time.Duration {
	sec, err := strconv.ParseInt(strings.TrimSpace(h.Get("Retry-After")), 10, 64)
	if err != nil || sec < 0 {
		return 0
	}
	return time.Duration(sec) * time.Second
}
