package tool_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/agentplane/agentplane/internal/tool"
)

func TestOpenAISchema(t *testing.T) {
	tl := mustCompile(t, transferDef())
	got := tl.OpenAISchema()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	// Decode what would go on the wire, and check its shape there.
	var wire struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	if wire.Type != "function" || wire.Function.Name != "payments__transfer" || wire.Function.Description != "Move money." {
		t.Errorf("shape: %s", b)
	}
	if wire.Function.Parameters["type"] != "object" || wire.Function.Parameters["additionalProperties"] != false {
		t.Errorf("parameters: %v", wire.Function.Parameters)
	}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(b, &top)
	if len(top) != 2 {
		t.Errorf("top-level keys: %s", b)
	}

	// Each call returns a fresh map: changing one does not change the tool.
	got["function"].(map[string]any)["parameters"].(map[string]any)["type"] = "string"
	again := tl.OpenAISchema()
	if again["function"].(map[string]any)["parameters"].(map[string]any)["type"] != "object" {
		t.Error("OpenAISchema returned shared state")
	}
}

// Numbers in the schema are passed through exactly.
func TestOpenAISchemaNumbers(t *testing.T) {
	d := tool.Definition{Name: "n", Kind: tool.KindClient,
		Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer","maximum":9007199254740993}}}`)}
	b, _ := json.Marshal(mustCompile(t, d).OpenAISchema())
	if !regexp.MustCompile(`"maximum":9007199254740993\b`).Match(b) {
		t.Errorf("large number changed: %s", b)
	}
}

var openAIName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestFunctionNameRoundTrip(t *testing.T) {
	for _, name := range []string{"payments.transfer", "a", "A-b_c", "x._y", "a..b", "_lead", "trail_", "v1.users.get-by-id"} {
		tl := mustCompile(t, tool.Definition{Name: name, Kind: tool.KindClient})
		fn := tl.OpenAISchema()["function"].(map[string]any)["name"].(string)
		if fn != tool.FunctionName(name) {
			t.Errorf("%q: schema name %q, FunctionName %q", name, fn, tool.FunctionName(name))
		}
		if !openAIName.MatchString(fn) {
			t.Errorf("%q: %q is not a valid OpenAI function name", name, fn)
		}
		if back := tool.ToolNameFromFunction(fn); back != name {
			t.Errorf("%q → %q → %q", name, fn, back)
		}
	}
	if got := tool.FunctionName("payments.transfer"); got != "payments__transfer" {
		t.Errorf("FunctionName = %q", got)
	}
	if got := tool.ToolNameFromFunction("payments__transfer"); got != "payments.transfer" {
		t.Errorf("ToolNameFromFunction = %q", got)
	}
}

// For every name Compile accepts, the mapping is a bijection onto valid
// OpenAI names; names it would garble are refused. MCP tools
// ("{server}@{tool}") are checked under their own kind.
func FuzzFunctionName(f *testing.F) {
	for _, s := range []string{"payments.transfer", "a__b", "a_.b", "a._b", "a...b", "_", ".",
		"srv@echo", "srv@get-sum", "srv@a--b", "srv@a.b", "s-@x", "s@-x", "a--b", "s@@x", "s@x@y", "a_b-c@d.e_f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		kind := tool.KindClient
		if tool.IsMCPName(name) {
			kind = tool.KindMCP
		}
		_, err := tool.Compile(tool.Definition{Name: name, Kind: kind})
		fn := tool.FunctionName(name)
		if err != nil {
			return
		}
		if !openAIName.MatchString(fn) {
			t.Fatalf("accepted %q maps to invalid function name %q", name, fn)
		}
		if back := tool.ToolNameFromFunction(fn); back != name {
			t.Fatalf("accepted %q does not round-trip: %q → %q", name, fn, back)
		}
		if c := tool.CanonicalName(fn); c != name {
			t.Fatalf("accepted %q: CanonicalName(%q) = %q", name, fn, c)
		}
		if c := tool.CanonicalName(name); c != name {
			t.Fatalf("accepted %q: CanonicalName of itself = %q", name, c)
		}
	})
}
