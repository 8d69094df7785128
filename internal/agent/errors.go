// Package agent talks to agents, which are external HTTP services: it checks
// that an agent's endpoint may be reached at all (SSRF rules, seed 001 §2.2),
// dials only addresses that pass those rules, invokes agents over HTTP with a
// text/event-stream answer (DESIGN §5) and probes their health.
package agent

import "fmt"

// Error codes carried by EndpointError and InvokeError. They are part of the
// wire contract: runs fail with them and clients see them.
const (
	// CodeInvalidEndpoint: the endpoint is not an absolute http(s) URL with a
	// host, or it carries userinfo or a fragment, or its host cannot be resolved.
	CodeInvalidEndpoint = "invalid_endpoint"
	// CodeEndpointNotAllowed: the endpoint's address is refused by the SSRF
	// rules and is not on the allowlist.
	CodeEndpointNotAllowed = "endpoint_not_allowed"
	// CodeAgentHTTPError: the agent answered a non-2xx status, or not
	// text/event-stream.
	CodeAgentHTTPError = "agent_http_error"
	// CodeAgentProtocolError: the agent's event stream is malformed.
	CodeAgentProtocolError = "agent_protocol_error"
	// CodeAgentDisconnected: the stream ended without done or error.
	CodeAgentDisconnected = "agent_disconnected"
	// CodeAgentTimeout: no first event in time, or too long a silence.
	CodeAgentTimeout = "agent_timeout"
	// CodeAgentUnreachable: no connection could be made (DNS, refused, TLS).
	CodeAgentUnreachable = "agent_unreachable"
	// CodeAgentError: the agent sent `event: error` without a usable code.
	CodeAgentError = "agent_error"
)

// EndpointError says why an endpoint was refused. Code is CodeInvalidEndpoint
// or CodeEndpointNotAllowed.
type EndpointError struct {
	Code    string
	Message string
	// Err is the underlying cause, if any (a parse or lookup error).
	Err error
}

// Error returns the code and message.
func (e *EndpointError) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the underlying cause.
func (e *EndpointError) Unwrap() error { return e.Err }

func invalidEndpoint(err error, format string, args ...any) *EndpointError {
	return &EndpointError{Code: CodeInvalidEndpoint, Message: fmt.Sprintf(format, args...), Err: err}
}

func notAllowed(format string, args ...any) *EndpointError {
	return &EndpointError{Code: CodeEndpointNotAllowed, Message: fmt.Sprintf(format, args...)}
}

// InvokeError is how an invoke or probe failed. Code is one of the Code*
// constants, or the code an agent sent in its `event: error`.
type InvokeError struct {
	Code    string
	Message string
	// Status is the agent's HTTP status when there was a response, else 0.
	Status int
	// Err is the underlying cause, if any (a network, SSE or JSON error).
	Err error
}

// Error returns the code, the HTTP status if any, and the message.
func (e *InvokeError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the underlying cause.
func (e *InvokeError) Unwrap() error { return e.Err }

// ErrorCode is the code a span's status carries (tracing.End).
func (e *InvokeError) ErrorCode() string { return e.Code }
