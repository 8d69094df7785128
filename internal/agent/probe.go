package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// Probe checks an agent's health with GET endpoint+"/health": any 2xx is
// healthy. The whole probe is bounded by FirstByteTimeout. Errors are as for
// Invoke: an *InvokeError (agent_http_error, agent_unreachable,
// agent_timeout, endpoint_not_allowed, invalid_endpoint, ...) or, when ctx
// ends, an error wrapping ctx.Err().
func (c *Client) Probe(ctx context.Context, endpoint string) error {
	u, err := parseEndpoint(endpoint)
	if err != nil {
		return endpointFailure(err)
	}
	limit := c.firstByteTimeout()
	reqCtx, cancel := context.WithTimeoutCause(ctx, limit,
		&InvokeError{Code: CodeAgentTimeout, Message: fmt.Sprintf("no health answer from the agent within %s", limit)})
	defer cancel()
	var connected atomic.Bool
	reqCtx = trackConnection(reqCtx, &connected)

	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, u.JoinPath("health").String(), nil)
	if err != nil {
		return endpointFailure(invalidEndpoint(err, "cannot build request"))
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return failure(ctx, reqCtx, err, connected.Load())
	}
	defer resp.Body.Close()
	if err := checkResponse(resp, ""); err != nil {
		return err
	}
	// Drain a little so the connection can be reused by the next probe.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return nil
}
