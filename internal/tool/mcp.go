package tool

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// MCPDefaults is what an MCP server's registration says about every tool it
// serves (PUT /v1/mcp_servers/{name}: policy, timeout_ms,
// approval_timeout_ms, on_failure, agents). Zero values mean the defaults
// of any tool.
type MCPDefaults struct {
	Policy            Policy   `json:"policy"`
	TimeoutMS         int64    `json:"timeout_ms,omitempty"`
	ApprovalTimeoutMS int64    `json:"approval_timeout_ms,omitempty"`
	OnFailure         string   `json:"on_failure,omitempty"`
	Agents            []string `json:"agents,omitempty"`
}

// MCPListedTool is one tool as its MCP server lists it (tools/list).
type MCPListedTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// MCPDefinition is the definition of the tool "{server}@{listed.Name}": the
// server's input schema and description, under the server's defaults,
// with the fields an override sets replacing them. override is the stored
// per-tool row (PUT /v1/tools/{server}@{tool}, checked by
// CheckMCPOverride) or nil. An override replaces:
//
//   - description, when not empty;
//   - policy, when it has a decision: its decision and rules together
//     replace the server's (a tool's policy is read as one list, so rules
//     are never merged);
//   - timeout_ms, approval_timeout_ms and on_failure, when set;
//   - agents, when not empty.
//
// The result still needs Compile, which may refuse a schema the server
// sent (the tool is then not offered).
func MCPDefinition(server string, defaults MCPDefaults, listed MCPListedTool, override *Definition) Definition {
	d := Definition{
		Name:              MCPName(server, listed.Name),
		Kind:              KindMCP,
		Description:       truncateDescription(listed.Description),
		Parameters:        mcpInputSchema(listed.InputSchema),
		Policy:            Policy{Decision: defaults.Policy.Decision, Rules: slices.Clone(defaults.Policy.Rules)},
		TimeoutMS:         defaults.TimeoutMS,
		ApprovalTimeoutMS: defaults.ApprovalTimeoutMS,
		OnFailure:         defaults.OnFailure,
		Agents:            slices.Clone(defaults.Agents),
	}
	if override == nil {
		return d
	}
	if override.Description != "" {
		d.Description = override.Description
	}
	if override.Policy.Decision != "" {
		d.Policy = Policy{Decision: override.Policy.Decision, Rules: slices.Clone(override.Policy.Rules)}
	}
	if override.TimeoutMS != 0 {
		d.TimeoutMS = override.TimeoutMS
	}
	if override.ApprovalTimeoutMS != 0 {
		d.ApprovalTimeoutMS = override.ApprovalTimeoutMS
	}
	if override.OnFailure != "" {
		d.OnFailure = override.OnFailure
	}
	if len(override.Agents) > 0 {
		d.Agents = slices.Clone(override.Agents)
	}
	if len(override.Redact) > 0 {
		d.Redact = slices.Clone(override.Redact)
	}
	return d
}

// CheckMCPOverride checks a per-tool override of an MCP tool as it is PUT
// and returns it as it should be stored: as given, not with defaults filled
// in, because an absent field means "the server's" (see MCPDefinition).
// The kind may be left out. The input schema comes from the server, so
// parameters are refused, as is a policy with rules but no decision (it
// would be unclear whether the server's decision or "allow" applies).
// Every field is checked exactly as Compile checks it.
func CheckMCPOverride(d Definition) (Definition, error) {
	if d.Kind == "" {
		d.Kind = KindMCP
	}
	if d.Kind != KindMCP {
		return d, invalid("kind", nil, `an override of an MCP server's tool has kind "mcp", not %q`, d.Kind)
	}
	if len(bytes.TrimSpace(d.Parameters)) > 0 && !bytes.Equal(bytes.TrimSpace(d.Parameters), []byte("null")) {
		return d, invalid("parameters", nil, "must be empty: an MCP tool's input schema comes from its server")
	}
	d.Parameters = nil
	if d.Policy.Decision == "" && len(d.Policy.Rules) > 0 {
		return d, invalid("policy.decision", nil, "is required when rules are given (the rules replace the server's policy as a whole)")
	}
	if _, err := Compile(d); err != nil {
		return d, err
	}
	d.Agents = slices.Clone(d.Agents)
	d.Policy.Rules = slices.Clone(d.Policy.Rules)
	d.Redact = slices.Clone(d.Redact)
	return d, nil
}

// CheckMCPDefaults checks a server's defaults as Compile would check them
// on any of its tools.
func CheckMCPDefaults(defaults MCPDefaults) error {
	_, err := Compile(MCPDefinition("x", defaults, MCPListedTool{Name: "x"}, nil))
	return err
}

// mcpInputSchema is the schema a server listed, or an empty object schema
// when it listed none (the MCP specification requires one; some servers
// omit it for tools without arguments).
func mcpInputSchema(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return json.RawMessage(defaultParameters)
	}
	return slices.Clone(t)
}

// truncateDescription cuts a server's description to MaxDescriptionLen
// bytes on a rune boundary: a long description is not a reason to refuse
// a tool someone else wrote.
func truncateDescription(s string) string {
	if len(s) <= MaxDescriptionLen {
		return s
	}
	cut := MaxDescriptionLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
