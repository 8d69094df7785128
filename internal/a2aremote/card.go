// Package a2aremote speaks A2A to remote agents registered with
// protocol "a2a" (DESIGN §12): it fetches and checks their cards at
// registration and for health, and invokes them with the same contract as
// an agentplane agent (agent.StreamEvent, agent.Result, *agent.InvokeError),
// so the run manager drives either through one loop. The wire protocol is
// github.com/a2aproject/a2a-go/v2's client (v1.0, and v0.3 through its
// compat transport); every request goes through the SSRF-checked HTTP
// client, so the card's URLs are held to the allowlist at every connection.
package a2aremote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/respond"
)

// MaxCardBytes bounds an agent card.
const MaxCardBytes = 1 << 20

// cardPath is where a card lives below an agent's base URL.
const cardPath = "/.well-known/agent-card.json"

// CardURL is the card's URL for a registered endpoint: the endpoint itself
// when it names a card (a path under /.well-known/ or ending in .json),
// else the endpoint's base URL with /.well-known/agent-card.json.
func CardURL(endpoint string) string {
	e := strings.TrimRight(endpoint, "/")
	if strings.Contains(e, "/.well-known/") || strings.HasSuffix(e, ".json") {
		return e
	}
	return e + cardPath
}

// FetchCard fetches the card of the agent at endpoint (see CardURL) and
// checks it: it must parse as an A2A card (v1.0 or v0.3), offer a JSON-RPC
// interface, and every URL it lists must pass the allowlist. It returns
// the card as stored (the v1.0 JSON shape). Refusals are *respond.Error:
// 400 invalid_agent_card, endpoint_not_allowed, invalid_endpoint, or 502
// agent_card_unavailable when the card cannot be fetched.
func (c *Client) FetchCard(ctx context.Context, endpoint string) (json.RawMessage, error) {
	card, err := c.fetchCard(ctx, endpoint)
	if err != nil {
		var ie *agent.InvokeError
		if errors.As(err, &ie) {
			status := http.StatusBadGateway
			code := "agent_card_unavailable"
			switch ie.Code {
			case agent.CodeEndpointNotAllowed, agent.CodeInvalidEndpoint:
				status, code = http.StatusBadRequest, ie.Code
			case agent.CodeAgentProtocolError:
				status, code = http.StatusBadRequest, "invalid_agent_card"
			}
			return nil, respond.E(status, code, "the A2A agent card at "+CardURL(endpoint)+": "+ie.Message)
		}
		return nil, err
	}
	if err := c.checkCard(ctx, card); err != nil {
		return nil, err
	}
	b, err := json.Marshal(card)
	if err != nil {
		return nil, fmt.Errorf("encode card: %w", err)
	}
	return b, nil
}

// Probe is an A2A agent's health check: its card answers and parses.
func (c *Client) Probe(ctx context.Context, endpoint string) error {
	_, err := c.fetchCard(ctx, endpoint)
	return err
}

// fetchCard GETs and parses the card; errors are *agent.InvokeError.
func (c *Client) fetchCard(ctx context.Context, endpoint string) (*a2a.AgentCard, error) {
	u := CardURL(endpoint)
	if _, err := url.Parse(u); err != nil {
		return nil, &agent.InvokeError{Code: agent.CodeInvalidEndpoint, Message: "not a URL", Err: err}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.firstByteTimeout(),
		&agent.InvokeError{Code: agent.CodeAgentTimeout, Message: fmt.Sprintf("no card from the agent within %s", c.firstByteTimeout())})
	defer cancel()
	st := &callState{}
	req, err := http.NewRequestWithContext(withState(ctx, st), http.MethodGet, u, nil)
	if err != nil {
		return nil, &agent.InvokeError{Code: agent.CodeInvalidEndpoint, Message: "cannot build the card request: " + err.Error(), Err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, st.classify(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, &agent.InvokeError{Code: agent.CodeAgentHTTPError, Status: resp.StatusCode,
			Message: fmt.Sprintf("the card answered %s: %s", resp.Status, strings.TrimSpace(string(b)))}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxCardBytes+1))
	if err != nil {
		return nil, st.classify(ctx, err)
	}
	if len(body) > MaxCardBytes {
		return nil, &agent.InvokeError{Code: agent.CodeAgentProtocolError, Message: fmt.Sprintf("the card is larger than %d bytes", MaxCardBytes)}
	}
	card, err := a2av0.NewAgentCardParser()(body)
	if err != nil {
		return nil, &agent.InvokeError{Code: agent.CodeAgentProtocolError, Message: "not an A2A agent card: " + err.Error(), Err: err}
	}
	return card, nil
}

// checkCard requires a JSON-RPC interface and every listed URL to pass the
// allowlist (they are dialled through it anyway; this refuses the
// registration up front rather than failing every run).
func (c *Client) checkCard(ctx context.Context, card *a2a.AgentCard) error {
	jsonrpc := false
	for _, in := range card.SupportedInterfaces {
		if in == nil {
			continue
		}
		if in.ProtocolBinding == a2a.TransportProtocolJSONRPC {
			jsonrpc = true
		}
		if c.Allow == nil {
			continue
		}
		if _, err := c.Allow.ValidateEndpoint(ctx, in.URL); err != nil {
			var ee *agent.EndpointError
			if errors.As(err, &ee) {
				return respond.E(http.StatusBadRequest, ee.Code, "the agent card lists "+in.URL+": "+ee.Message)
			}
			return err
		}
	}
	if !jsonrpc {
		return respond.E(http.StatusBadRequest, "invalid_agent_card", "the agent card offers no JSON-RPC interface (agentplane speaks A2A over JSON-RPC)")
	}
	return nil
}

// parseCard decodes a stored card.
func parseCard(raw json.RawMessage) (*a2a.AgentCard, error) {
	if len(raw) == 0 {
		return nil, &agent.InvokeError{Code: agent.CodeInvalidEndpoint, Message: "the agent has no stored A2A card; register it again"}
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(raw, &card); err != nil {
		return nil, &agent.InvokeError{Code: agent.CodeInvalidEndpoint, Message: "the stored A2A card does not parse; register the agent again", Err: err}
	}
	return &card, nil
}
