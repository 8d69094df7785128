package mcpclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/tool"
)

// Transports (Spec.Transport).
const (
	TransportStreamableHTTP = "streamable_http"
	TransportStdio          = "stdio"
)

// Bounds on a spec.
const (
	maxHeaders   = 32
	maxEnv       = 64
	maxArgs      = 64
	maxValueLen  = 8 << 10
	maxSpecBytes = 64 << 10
)

// Spec is an MCP server as an administrator registers it (PUT
// /v1/mcp_servers/{name}, DESIGN §13, or the config file's
// `mcp_servers:`). Exactly one transport's fields are set.
type Spec struct {
	// Name is the server's name, the "{server}" of its tools' names
	// (tool.CheckMCPServerName).
	Name string `json:"name" yaml:"name"`
	// Transport is TransportStreamableHTTP or TransportStdio.
	Transport string `json:"transport" yaml:"transport"`

	// URL is the Streamable HTTP endpoint. The SSRF rules apply to it at
	// registration and to every address dialled.
	URL string `json:"url,omitempty" yaml:"url"`
	// Headers are sent with every request (an Authorization header, say).
	Headers map[string]string `json:"headers,omitempty" yaml:"headers"`

	// Command is the program of a stdio server, run on the platform's host
	// (resolved in the platform's PATH) with Args. Its environment is Env
	// plus PATH, HOME, LANG and TMPDIR of the platform: nothing else of the
	// platform's environment (its keys, its database URL) reaches it.
	Command string            `json:"command,omitempty" yaml:"command"`
	Args    []string          `json:"args,omitempty" yaml:"args"`
	Env     map[string]string `json:"env,omitempty" yaml:"env"`

	// Policy is the default policy of every tool of the server; a per-tool
	// override (PUT /v1/tools/{server}@{tool}) replaces it.
	Policy tool.Policy `json:"policy" yaml:"policy"`
	// TimeoutMS bounds one call of any of its tools (default 60 000).
	TimeoutMS int64 `json:"timeout_ms,omitempty" yaml:"timeout_ms"`
	// ApprovalTimeoutMS is how long an approval of one of its calls may wait.
	ApprovalTimeoutMS int64 `json:"approval_timeout_ms,omitempty" yaml:"approval_timeout_ms"`
	// OnFailure is what a failed call does to its run ("fail_run", the default,
	// or "return_to_agent").
	OnFailure string `json:"on_failure,omitempty" yaml:"on_failure"`
	// Agents lists the agents that may call its tools; empty means every agent.
	Agents []string `json:"agents,omitempty" yaml:"agents"`
}

// Defaults are the spec's defaults for its tools.
func (s *Spec) Defaults() tool.MCPDefaults {
	return tool.MCPDefaults{Policy: s.Policy, TimeoutMS: s.TimeoutMS, ApprovalTimeoutMS: s.ApprovalTimeoutMS, OnFailure: s.OnFailure, Agents: s.Agents}
}

var headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`)

// reservedHeaders are set by the transport; a spec may not replace them.
var reservedHeaders = []string{"content-type", "accept", "content-length", "host", "mcp-session-id", "mcp-protocol-version", "last-event-id", "connection", "transfer-encoding"}

// Check checks every field and returns nil or a *respond.Error (400
// invalid_mcp_server naming the field). The URL's address is checked by
// the caller (the allowlist needs a context and may resolve names).
func (s *Spec) Check() error {
	if err := tool.CheckMCPServerName(s.Name); err != nil {
		return invalidSpec("name", err.(*tool.ValidationError).Message)
	}
	switch s.Transport {
	case TransportStreamableHTTP:
		if s.URL == "" {
			return invalidSpec("url", "is required for transport streamable_http")
		}
		if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 {
			return invalidSpec("command", "command, args and env are for transport stdio")
		}
		if len(s.Headers) > maxHeaders {
			return invalidSpec("headers", fmt.Sprintf("has %d entries; at most %d are allowed", len(s.Headers), maxHeaders))
		}
		for k, v := range s.Headers {
			if !headerName.MatchString(k) || slices.Contains(reservedHeaders, strings.ToLower(k)) {
				return invalidSpec("headers", fmt.Sprintf("%q is not a header a server entry may set", k))
			}
			if len(v) > maxValueLen || strings.ContainsAny(v, "\r\n\x00") {
				return invalidSpec("headers", fmt.Sprintf("the value of %q is not a valid header value", k))
			}
		}
	case TransportStdio:
		if strings.TrimSpace(s.Command) == "" {
			return invalidSpec("command", "is required for transport stdio")
		}
		if s.URL != "" || len(s.Headers) > 0 {
			return invalidSpec("url", "url and headers are for transport streamable_http")
		}
		if len(s.Args) > maxArgs {
			return invalidSpec("args", fmt.Sprintf("has %d entries; at most %d are allowed", len(s.Args), maxArgs))
		}
		if len(s.Env) > maxEnv {
			return invalidSpec("env", fmt.Sprintf("has %d entries; at most %d are allowed", len(s.Env), maxEnv))
		}
		for _, a := range append([]string{s.Command}, s.Args...) {
			if len(a) > maxValueLen || strings.ContainsRune(a, 0) {
				return invalidSpec("args", "command and args must be text without NUL bytes")
			}
		}
		for k, v := range s.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || len(v) > maxValueLen || strings.ContainsRune(v, 0) {
				return invalidSpec("env", fmt.Sprintf("%q is not a valid environment variable", k))
			}
		}
	case "":
		return invalidSpec("transport", `is required: "streamable_http" or "stdio"`)
	default:
		return invalidSpec("transport", fmt.Sprintf(`must be "streamable_http" or "stdio", not %q`, s.Transport))
	}
	if err := tool.CheckMCPDefaults(s.Defaults()); err != nil {
		var ve *tool.ValidationError
		if errors.As(err, &ve) {
			return invalidSpec(ve.Field, ve.Message)
		}
		return err
	}
	return nil
}

func invalidSpec(field, message string) *respond.Error {
	e := respond.E(http.StatusBadRequest, "invalid_mcp_server", "invalid MCP server: "+field+": "+message)
	e.Details = map[string]any{"field": field}
	return e
}

// DecodeSpec reads a spec from JSON, refusing unknown fields (a misspelt
// "polcy" must not leave the server's tools open) and trailing data.
func DecodeSpec(raw []byte) (*Spec, error) {
	if len(raw) > maxSpecBytes {
		return nil, respond.E(http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("an MCP server spec is at most %d bytes", maxSpecBytes))
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, respond.E(http.StatusBadRequest, "invalid_json", "MCP server spec: "+err.Error())
	}
	if dec.More() {
		return nil, respond.E(http.StatusBadRequest, "invalid_json", "trailing data after the JSON body")
	}
	return &s, nil
}

// redacted is the spec as the API shows it: header and environment values
// are secrets more often than not, so only their names are shown.
func (s *Spec) redacted() Spec {
	c := *s
	c.Headers = redactValues(s.Headers)
	c.Env = redactValues(s.Env)
	return c
}

// Redacted stands for a value the API does not show.
const Redacted = "(redacted)"

func redactValues(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = Redacted
	}
	return out
}
