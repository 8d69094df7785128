package tool

import (
	"regexp"
	"strings"
)

// KindMCP tools are served by a registered MCP server (DESIGN §13). They are
// not registered one by one: every tool a server lists is the tool
// "{server}@{tool}", with the server's input schema and the server's
// default policy. A Definition of kind "mcp" is the optional per-tool
// override (PUT /v1/tools/{server}@{tool}); see MCPOverride.
const KindMCP = "mcp"

// MCPSeparator joins an MCP server's name and one of its tools' names in a
// tool name: "{server}@{tool}" (seed 003's naming).
const MCPSeparator = "@"

// mcpFunctionSeparator spells MCPSeparator in OpenAI function names, which
// allow only [A-Za-z0-9_-]. See FunctionName for why it is unambiguous.
const mcpFunctionSeparator = "--"

// MaxMCPServerNameLen bounds an MCP server's name: short, because every one
// of its tools carries it within OpenAI's 64-character function names.
const MaxMCPServerNameLen = 32

// mcpServerPattern: letters, digits, "_" and "-", beginning and ending with
// a letter or digit. No "." (it would be spelt "__" as a function), and the
// ends matter for the split at "--" (see FunctionName).
var mcpServerPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$`)

// CheckMCPServerName reports why name cannot name an MCP server, or nil.
func CheckMCPServerName(name string) error {
	if name == "" {
		return invalid("name", nil, "is required")
	}
	if len(name) > MaxMCPServerNameLen || !mcpServerPattern.MatchString(name) || strings.Contains(name, mcpFunctionSeparator) {
		return invalid("name", nil, `must be 1-%d characters of [A-Za-z0-9_-], begin and end with a letter or digit and not contain "--", got %q`, MaxMCPServerNameLen, truncateRunes(name, 80))
	}
	return nil
}

// CheckMCPToolName reports why an MCP server's tool name cannot be exposed
// as a platform tool, or nil: it must be 1-128 characters of
// [A-Za-z0-9_.-] (the MCP specification's recommended alphabet) whose
// function spelling maps back to it (no "__" and no "_.", as for any tool
// name). A server's tools that fail this are not offered; the server's
// status names them.
func CheckMCPToolName(name string) error {
	if name == "" || len(name) > MaxNameLen || !namePattern.MatchString(name) {
		return invalid("tool_name", nil, "must be 1-%d characters of [A-Za-z0-9_.-], got %q", MaxNameLen, truncateRunes(name, 140))
	}
	if toolNameFromPlainFunction(plainFunctionName(name)) != name {
		return invalid("tool_name", nil, `must not contain "__" or "_." (its function name would not map back to it)`)
	}
	return nil
}

// MCPName is the platform's name of tool on MCP server server.
func MCPName(server, tool string) string { return server + MCPSeparator + tool }

// SplitMCPName splits "{server}@{tool}" at its first "@"; ok is false for a
// name without one.
func SplitMCPName(name string) (server, tool string, ok bool) {
	return strings.Cut(name, MCPSeparator)
}

// IsMCPName reports whether name has the "{server}@{tool}" form.
func IsMCPName(name string) bool { return strings.Contains(name, MCPSeparator) }

// CanonicalName maps either spelling of a tool's name — the name itself or
// its OpenAI function name — to the name. Both spellings are accepted
// wherever a tool is named by a caller (POST /v1/tools/{name}:invoke, the
// /mcp server's tools/call), so an agent can pass back whatever the
// listing gave it. A function spelling never contains "." or "@", and a
// name without them is its own function spelling unless it contains "__"
// or "--", which no registrable name does; so the two cannot be confused.
func CanonicalName(name string) string {
	if strings.ContainsAny(name, ".@") {
		return name
	}
	return ToolNameFromFunction(name)
}

// checkMCPName checks a "{server}@{tool}" name.
func checkMCPName(name string) error {
	server, tl, ok := SplitMCPName(name)
	if !ok {
		return invalid("tool_name", nil, `an MCP tool is named "{server}@{tool}", got %q`, truncateRunes(name, 140))
	}
	if err := CheckMCPServerName(server); err != nil {
		return invalid("tool_name", nil, "the MCP server part %q: %s", truncateRunes(server, 80), err.(*ValidationError).Message)
	}
	if err := CheckMCPToolName(tl); err != nil {
		return invalid("tool_name", nil, "the MCP tool part %q: %s", truncateRunes(tl, 140), err.(*ValidationError).Message)
	}
	if fn := FunctionName(name); len(fn) > maxFunctionNameLen {
		return invalid("tool_name", nil, "becomes the OpenAI function name %q, longer than the %d characters OpenAI allows", fn, maxFunctionNameLen)
	}
	return nil
}
