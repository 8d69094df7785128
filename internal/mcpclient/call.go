package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/toolsvc"
	"github.com/agentplane/agentplane/internal/tracing"
)

// CallMCP implements toolsvc.MCPSource: one tools/call on the server's
// live session — a POST of its own on a Streamable HTTP session
// (httpcall.go), the SDK's CallTool on a stdio one. Cancelling ctx sends
// notifications/cancelled. A server without a session fails at once with
// ErrMCPUnreachable, and so does a call whose session the platform closes
// under it (the server deleted or replaced); a session lost during the
// call, with ErrMCPOutcomeUnknown.
func (m *Manager) CallMCP(ctx context.Context, call toolsvc.MCPCall) (*toolsvc.MCPResult, error) {
	c := m.conn(call.Server)
	if c == nil {
		return nil, fmt.Errorf("%w: no MCP server named %s is registered", toolsvc.ErrMCPUnreachable, call.Server)
	}
	cs, hc, why := c.currentSession()
	if cs == nil {
		return nil, fmt.Errorf("%w: MCP server %s is not connected (%s)", toolsvc.ErrMCPUnreachable, call.Server, why)
	}
	// A call in flight must not outlive its session: a Streamable HTTP
	// call is a POST of its own that would run on to its deadline, and the
	// session's close (its DELETE, a stdio server's exit) waits for the
	// calls its server still runs. Ended with the conn, the call sends
	// notifications/cancelled, so the server ends its handler too.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	res, err := c.call(cctx, cs, hc, call)
	if err != nil && ctx.Err() == nil && c.ctx.Err() != nil {
		// The server was deleted or replaced (or the process is stopping)
		// under the call: it fails at once, as one made while the server is
		// away does (DESIGN §13), instead of hanging to its deadline.
		return nil, fmt.Errorf("%w: MCP server %s was removed or replaced while the call ran (the tool may have run)", toolsvc.ErrMCPUnreachable, call.Server)
	}
	return res, err
}

// call is CallMCP on a live session.
func (c *conn) call(ctx context.Context, cs *mcp.ClientSession, hc *http.Client, call toolsvc.MCPCall) (*toolsvc.MCPResult, error) {
	args := call.Args
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	token, onProgress := "", call.OnProgress
	if call.ProgressToken != "" && call.OnProgress != nil {
		token = call.ProgressToken
		// Also for a direct call: a server may send the progress on the
		// session's standalone stream, which the SDK reads.
		defer c.onProgress(token, onProgress)()
	}
	if s, ok := c.directSession(cs, hc); ok && !sdkCalls {
		return c.callHTTP(ctx, s, call.Tool, args, token, onProgress)
	}
	params := &mcp.CallToolParams{Name: call.Tool, Arguments: args}
	meta := mcp.Meta{}
	if token != "" {
		meta["progressToken"] = token
	}
	// A stdio server has no headers to carry the trace context: it goes in
	// the request's _meta, where OpenTelemetry's MCP conventions put it,
	// so the server's spans can join the run's trace (DESIGN §14).
	if tp := tracing.Traceparent(ctx); tp != "" {
		meta["traceparent"] = tp
	}
	if len(meta) > 0 {
		params.Meta = meta
	}
	res, err := callTool(ctx, cs, params)
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

// sdkCalls makes every tools/call go through the SDK (tests and
// benchmarks compare the two ways).
var sdkCalls = false

// answeredGrace bounds how long the HTTP exchange of an answered
// tools/call may go on after its answer (see callTool).
const answeredGrace = 5 * time.Second

// callTool is cs.CallTool with ctx's cancellation, but not the end of the
// call, passed on to the request.
//
// The SDK sends a Streamable HTTP tools/call as a POST under the context
// it is given and hands the answer over as soon as it has read it from
// the response's event stream; it reads the rest of the stream (the end of
// the chunked body) on its own goroutine afterwards. A context cancelled
// as soon as the call returns — as every caller's is, the tool call's
// deadline being a context — races that read, and when it wins the HTTP
// transport closes the connection instead of keeping it alive: measured,
// one call in four then paid a new TCP connection (and the server a new
// connection goroutine) on the next call.
//
// So the request runs under a context of its own: cancelled at once when
// ctx ends before the answer (the SDK then sends notifications/cancelled
// and the request is abandoned, as before), and only answeredGrace after
// an answer otherwise — a server that ends its stream after the answer,
// as the specification asks, has long ended it by then; one that does not
// is cut off then.
func callTool(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	res, err := cs.CallTool(reqCtx, params)
	if !stop() || err != nil {
		// ctx ended (the request is, or is being, cancelled) or the call
		// failed: nothing is left to read.
		cancel()
		return res, err
	}
	time.AfterFunc(answeredGrace, cancel)
	return res, nil
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
		return &toolsvc.MCPRPCError{Code: wire.Code, Message: wire.Message, Data: wire.Data}
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
