package agentplane

import "strings"

// MCPConfig is how an MCP client library reaches the platform's tools for
// one run (DESIGN §13): the platform's Streamable HTTP MCP server and the
// headers every request to it must carry. The MCP session is bound to the
// run; tools/list answers the tools the run may call, tools/call calls one
// through the platform (policy, approvals, deadlines), sending progress
// notifications while it waits for a human or the user's client.
//
// With the Go MCP SDK (github.com/modelcontextprotocol/go-sdk), give the
// transport an http.Client whose RoundTripper sets Headers; with the npm
// SDK, pass them as requestInit.headers of StreamableHTTPClientTransport.
type MCPConfig struct {
	// URL is "{platform}/mcp".
	URL string `json:"url"`
	// Headers are Authorization (Bearer, the agent's key), x-run-id and
	// x-session-id.
	Headers map[string]string `json:"headers"`
}

// MCPConfig is the /mcp URL and headers for this client's run; the zero
// MCPConfig when c is nil (no platform configured).
func (c *Client) MCPConfig() MCPConfig {
	if c == nil {
		return MCPConfig{}
	}
	h := c.attribution()
	h["Authorization"] = "Bearer " + c.APIKey
	return MCPConfig{URL: strings.TrimRight(c.BaseURL, "/") + "/mcp", Headers: h}
}

// MCPConfig is the /mcp URL and headers for this run (see Client.MCPConfig);
// the zero MCPConfig when no platform is configured.
func (r *Request) MCPConfig() MCPConfig { return r.client.MCPConfig() }
