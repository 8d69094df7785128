package tool

import (
	"bytes"
	"encoding/json"
	"strings"
)

// maxFunctionNameLen is OpenAI's limit on function names, which allow only
// [a-zA-Z0-9_-].
const maxFunctionNameLen = 64

// FunctionName is the OpenAI function name of a tool: every "." becomes "__",
// because OpenAI function names may not contain dots while our names are
// namespaced with them ("payments.transfer" → "payments__transfer").
// ToolNameFromFunction reverses it. Compile refuses names for which the
// mapping would not round-trip (names containing "__" or "_.") or whose
// function name would exceed 64 characters, so for every registered tool
// ToolNameFromFunction(FunctionName(name)) == name.
func FunctionName(toolName string) string {
	return strings.ReplaceAll(toolName, ".", "__")
}

// ToolNameFromFunction maps an OpenAI function name, as a model returns it in
// a tool call, back to the tool name (each "__" becomes "."). A name no tool
// maps to yields a name no tool has; the caller's registry lookup refuses it.
func ToolNameFromFunction(functionName string) string {
	return strings.ReplaceAll(functionName, "__", ".")
}

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
