package tool

import (
	"bytes"
	"encoding/json"
	"strings"
)

// maxFunctionNameLen is OpenAI's limit on function names, which allow only
// [a-zA-Z0-9_-].
const maxFunctionNameLen = 64

// FunctionName is the OpenAI function name of a tool. OpenAI function names
// allow only [a-zA-Z0-9_-], while our names are namespaced with "." and MCP
// tools are named "{server}@{tool}", so:
//
//   - every "." becomes "__" ("payments.transfer" → "payments__transfer");
//   - the "@" of an MCP tool becomes "--", and the tool part is spelt as
//     above ("files@read.text" → "files--read__text").
//
// ToolNameFromFunction reverses it: a function name containing "--" is an
// MCP tool, split at its first "--"; any other maps each "__" back to ".".
// The mapping is unambiguous because Compile and the MCP name checks refuse
// every name it could not round-trip:
//
//   - plain names may not contain "--" (a "." never yields "-", so no plain
//     name's function contains "--", and every MCP tool's does), nor "__"
//     or "_." (so the "__" of a function name is always a ".");
//   - an MCP server's name has no "." and no "--" and does not end with
//     "-", so the first "--" of the function name is the separator;
//   - an MCP tool part follows the plain rules except that it may contain
//     "--" (it comes after the separator, so the split is not affected).
//
// So for every valid name n, ToolNameFromFunction(FunctionName(n)) == n, and
// two names never share a function name (TestFunctionNameNoCollision,
// FuzzFunctionName).
func FunctionName(toolName string) string {
	if server, tl, ok := SplitMCPName(toolName); ok {
		return server + mcpFunctionSeparator + plainFunctionName(tl)
	}
	return plainFunctionName(toolName)
}

// ToolNameFromFunction maps an OpenAI function name, as a model returns it in
// a tool call, back to the tool name (see FunctionName). A name no tool
// maps to yields a name no tool has; the caller's registry lookup refuses it.
func ToolNameFromFunction(functionName string) string {
	if server, tl, ok := strings.Cut(functionName, mcpFunctionSeparator); ok {
		return server + MCPSeparator + toolNameFromPlainFunction(tl)
	}
	return toolNameFromPlainFunction(functionName)
}

func plainFunctionName(name string) string { return strings.ReplaceAll(name, ".", "__") }

func toolNameFromPlainFunction(fn string) string { return strings.ReplaceAll(fn, "__", ".") }

// OpenAISchema returns the tool as an OpenAI function-calling tool:
//
//	{"type": "function", "function": {"name": …, "description": …, "parameters": {…}}}
//
// name is FunctionName(Def.Name). The map is freshly built on every call, so
// the caller may change it.
func (t *Tool) OpenAISchema() map[string]any {
	return map[string]any{
		"type": "function",
		"function": map[string]any{
			"name":        FunctionName(t.Def.Name),
			"description": t.Def.Description,
			"parameters":  t.parametersMap(),
		},
	}
}

// parametersMap decodes the compiled schema. Numbers stay json.Number so that
// re-encoding keeps them exactly as written.
func (t *Tool) parametersMap() map[string]any {
	dec := json.NewDecoder(bytes.NewReader(t.Def.Parameters))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		// Compile stored a valid object schema; this cannot happen.
		return map[string]any{"type": "object"}
	}
	return m
}
