package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// CallMCP implements toolsvc.MCPSource: one tools/call on the server's
// live session. Cancelling ctx makes the SDK send notifications/cancelled.
// A server without a session fails at once with ErrMCPUnreachable; a
// session lost during the call, with ErrMCPOutcomeUnknown.
func (m *Manager) CallMCP(ctx context.Context, call toolsvc.MCPCall) (*toolsvc.MCPResult, error) {
	c := m.conn(call.Server)
	if c == nil {
		return nil, fmt.Errorf("%w: no MCP server named %s is registered", toolsvc.ErrMCPUnreachable, call.Server)
	}
	cs, why := c.currentSession()
	if cs == nil {
		return nil, fmt.Errorf("%w: MCP server %s is not connected (%s)", toolsvc.ErrMCPUnreachable, call.Server, why)
	}
	args := call.Args
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	params := &mcp.CallToolParams{Name: call.Tool, Arguments: args}
	if call.ProgressToken != "" && call.OnProgress != nil {
		params.Meta = mcp.Meta{"progressToken": call.ProgressToken}
		c.progress.Store(call.ProgressToken, call.OnProgress)
		defer c.progress.Delete(call.ProgressToken)
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return nil, c.callError(ctx, cs, err)
	}
	out := &toolsvc.MCPResult{IsError: res.IsError, Content: json.RawMessage(`[]`)}
	if len(res.Content) > 0 {
		if out.Content, err = json.Marshal(res.Content); err != nil {
			return nil, fmt.Errorf("%w: the answer's content: %v", toolsvc.ErrMCPOutcomeUnknown, err)
		}
	}
	if res.StructuredContent != nil {
		if out.StructuredContent, err = json.Marshal(res.StructuredContent); err != nil {
			return nil, fmt.Errorf("%w: the answer's structuredContent: %v", toolsvc.ErrMCPOutcomeUnknown, err)
		}
	}
	return out, nil
}

// callError says what a failed tools/call means for its tool call.
func (c *conn) callError(ctx context.Context, cs *mcp.ClientSession, err error) error {
	var wire *jsonrpc.Error
	var ee *agent.EndpointError
	switch {
	case ctx.Err() != nil:
		return err
	case errors.As(err, &wire):
		// The server's answer: the tool's own failure (an unknown tool on
		// servers that say so with an error instead of isError).
		return fmt.Errorf("%s (JSON-RPC error %d)", wire.Message, wire.Code)
	case errors.As(err, &ee), errors.Is(err, syscall.ECONNREFUSED):
		// Nothing was sent. The session cannot be used any more either.
		go cs.Close()
		return fmt.Errorf("%w: MCP server %s: %v", toolsvc.ErrMCPUnreachable, c.row.Name, err)
	case errors.Is(err, mcp.ErrConnectionClosed):
		go cs.Close()
		return fmt.Errorf("%w: MCP server %s: %v", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, err)
	}
	return fmt.Errorf("%w: MCP server %s: %v", toolsvc.ErrMCPOutcomeUnknown, c.row.Name, err)
}
