package tool_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/tool"
)

// transferDef is a server tool used across the tests.
func transferDef() tool.Definition {
	return tool.Definition{
		Name:        "payments.transfer",
		Kind:        tool.KindServer,
		Description: "Move money.",
		Endpoint:    "http://payments.internal/transfer",
		Parameters: json.RawMessage(`{
			"type": "object",
			"required": ["amount", "to"],
			"additionalProperties": false,
			"properties": {
				"amount": {"type": "number", "exclusiveMinimum": 0},
				"to": {"type": "string", "minLength": 1},
				"memo": {"type": "string"},
				"tags": {"type": "array", "items": {"type": "string"}}
			}
		}`),
	}
}

func mustCompile(t testing.TB, d tool.Definition) *tool.Tool {
	t.Helper()
	tl, err := tool.Compile(d)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return tl
}

func TestCompileFillsDefaults(t *testing.T) {
	tl := mustCompile(t, tool.Definition{Name: "ui.confirm", Kind: tool.KindClient})
	d := tl.Def
	if string(d.Parameters) != `{"type":"object"}` {
		t.Errorf("Parameters = %s, want {\"type\":\"object\"}", d.Parameters)
	}
	if d.TimeoutMS != 60_000 {
		t.Errorf("TimeoutMS = %d, want 60000", d.TimeoutMS)
	}
	if d.ApprovalTimeoutMS != 600_000 {
		t.Errorf("ApprovalTimeoutMS = %d, want 600000", d.ApprovalTimeoutMS)
	}
	if d.OnFailure != tool.OnFailureFailRun {
		t.Errorf("OnFailure = %q, want fail_run", d.OnFailure)
	}
	if d.Policy.Decision != tool.DecisionAllow {
		t.Errorf("Policy.Decision = %q, want allow", d.Policy.Decision)
	}
	// "null" is what a JSON body with "parameters": null decodes to.
	tl = mustCompile(t, tool.Definition{Name: "x", Kind: tool.KindClient, Parameters: json.RawMessage(" null ")})
	if string(tl.Def.Parameters) != `{"type":"object"}` {
		t.Errorf("null Parameters = %s, want the default", tl.Def.Parameters)
	}
}

func TestCompileKeepsExplicitValues(t *testing.T) {
	d := transferDef()
	d.TimeoutMS = 1
	d.ApprovalTimeoutMS = tool.MaxApprovalTimeoutMS
	d.OnFailure = tool.OnFailureReturnToAgent
	d.Policy.Decision = tool.DecisionRequireApproval
	d.Agents = []string{"treasury"}
	tl := mustCompile(t, d)
	if tl.Def.TimeoutMS != 1 || tl.Def.ApprovalTimeoutMS != 7*24*3_600_000 ||
		tl.Def.OnFailure != "return_to_agent" || tl.Def.Policy.Decision != "require_approval" {
		t.Errorf("explicit values changed: %+v", tl.Def)
	}
	if strings.ContainsAny(string(tl.Def.Parameters), "\n\t") {
		t.Errorf("Parameters not compacted: %s", tl.Def.Parameters)
	}
	// The compiled definition round-trips through JSON, as GET /v1/tools shows it.
	b, err := json.Marshal(tl.Def)
	if err != nil {
		t.Fatal(err)
	}
	var back tool.Definition
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Compile(back); err != nil {
		t.Errorf("re-compiling the marshalled definition: %v", err)
	}
}

// Changing the caller's Definition after Compile must not change the Tool.
func TestCompileCopiesSlices(t *testing.T) {
	d := transferDef()
	d.Agents = []string{"a1"}
	d.Policy.Rules = []tool.Rule{{When: "true", Decision: tool.DecisionBlock}}
	tl := mustCompile(t, d)
	d.Agents[0] = "intruder"
	d.Policy.Rules[0].Decision = tool.DecisionAllow
	for i := range d.Parameters {
		d.Parameters[i] = ' '
	}
	if !tl.AllowsAgent("a1") || tl.AllowsAgent("intruder") {
		t.Errorf("Agents aliased the caller's slice: %v", tl.Def.Agents)
	}
	if tl.Def.Policy.Rules[0].Decision != tool.DecisionBlock {
		t.Errorf("Rules aliased the caller's slice")
	}
	if !json.Valid(tl.Def.Parameters) {
		t.Errorf("Parameters aliased the caller's slice")
	}
}

func TestAllowsAgent(t *testing.T) {
	open := mustCompile(t, tool.Definition{Name: "a", Kind: tool.KindClient})
	if !open.AllowsAgent("anyone") {
		t.Error("a tool without agents must allow every agent")
	}
	d := tool.Definition{Name: "a", Kind: tool.KindClient, Agents: []string{"x", "y"}}
	closed := mustCompile(t, d)
	if !closed.AllowsAgent("y") || closed.AllowsAgent("z") || closed.AllowsAgent("") {
		t.Error("AllowsAgent does not follow Agents")
	}
}

func TestCompileValidationErrors(t *testing.T) {
	long := strings.Repeat("a", 129)
	cases := []struct {
		name   string
		edit   func(*tool.Definition)
		field  string
		substr string
	}{
		{"empty name", func(d *tool.Definition) { d.Name = "" }, "tool_name", "required"},
		{"bad name char", func(d *tool.Definition) { d.Name = "pay ments" }, "tool_name", "[A-Za-z0-9_.-]"},
		{"slash in name", func(d *tool.Definition) { d.Name = "a/b" }, "tool_name", "[A-Za-z0-9_.-]"},
		{"name too long", func(d *tool.Definition) { d.Name = long }, "tool_name", "1-128"},
		{"function name too long", func(d *tool.Definition) { d.Name = strings.Repeat("a.", 32) + "b" }, "tool_name", "longer than the 64"},
		{"double underscore", func(d *tool.Definition) { d.Name = "pay__ments" }, "tool_name", `map back to "pay.ments"`},
		{"underscore before dot", func(d *tool.Definition) { d.Name = "pay_.ments" }, "tool_name", "map back"},
		{"no kind", func(d *tool.Definition) { d.Kind = "" }, "kind", "required"},
		{"unknown kind", func(d *tool.Definition) { d.Kind = "lambda" }, "kind", `not "lambda"`},
		{"server without endpoint", func(d *tool.Definition) { d.Endpoint = "" }, "endpoint", "required for a server tool"},
		{"client with endpoint", func(d *tool.Definition) { d.Kind = tool.KindClient }, "endpoint", "must be empty for a client tool"},
		{"description too long", func(d *tool.Definition) { d.Description = strings.Repeat("x", tool.MaxDescriptionLen+1) }, "description", "at most"},
		{"description not utf-8", func(d *tool.Definition) { d.Description = "\xff" }, "description", "UTF-8"},
		{"schema not JSON", func(d *tool.Definition) { d.Parameters = json.RawMessage(`{"type":`) }, "parameters", "not valid JSON"},
		{"schema not an object", func(d *tool.Definition) { d.Parameters = json.RawMessage(`true`) }, "parameters", "JSON Schema object"},
		{"schema not type object", func(d *tool.Definition) { d.Parameters = json.RawMessage(`{"type":"string"}`) }, "parameters", `"type": "object"`},
		{"schema without type", func(d *tool.Definition) { d.Parameters = json.RawMessage(`{"properties":{}}`) }, "parameters", `"type": "object"`},
		{"schema bad keyword value", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer","minimum":"zero"}}}`)
		}, "parameters", "not a valid JSON Schema"},
		{"schema bad regex", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"(["}}}`)
		}, "parameters", "not a valid JSON Schema"},
		{"schema external ref", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`)
		}, "parameters", "not allowed"},
		{"schema file ref", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`)
		}, "parameters", "not allowed"},
		{"schema relative ref", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"other.json"}}}`)
		}, "parameters", "not allowed"},
		{"schema dangling local ref", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`)
		}, "parameters", "not a valid JSON Schema"},
		{"schema too large", func(d *tool.Definition) {
			d.Parameters = json.RawMessage(`{"type":"object","description":"` + strings.Repeat("x", tool.MaxParametersLen) + `"}`)
		}, "parameters", "at most"},
		{"CEL syntax error", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "args.amount >", Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "does not compile"},
		{"CEL unknown variable", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "true", Decision: tool.DecisionAllow}, {When: "amount > 1", Decision: tool.DecisionBlock}}
		}, "policy.rules[1].when", "undeclared reference"},
		{"CEL non-bool", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "args.amount + 1", Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "must be a bool expression"},
		{"CEL string", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: `agent_id + "x"`, Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "has type string"},
		{"CEL dyn", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "args.flag", Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "must be a bool expression"},
		{"CEL type error", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: `agent_id > 1`, Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "does not compile"},
		{"CEL expression too long", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "true" + strings.Repeat(" ", tool.MaxRuleExprLen), Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "does not compile"},
		{"empty when", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{Decision: tool.DecisionBlock}}
		}, "policy.rules[0].when", "required"},
		{"unknown default decision", func(d *tool.Definition) { d.Policy.Decision = "deny" }, "policy.decision", `not "deny"`},
		{"unknown rule decision", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "true", Decision: "approve"}}
		}, "policy.rules[0].decision", `not "approve"`},
		{"missing rule decision", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{When: "true"}}
		}, "policy.rules[0].decision", "required"},
		{"rule named default", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{Name: "default", When: "true", Decision: tool.DecisionBlock}}
		}, "policy.rules[0].name", `not "default"`},
		{"rule name like a label", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{Name: "rule[3]", When: "true", Decision: tool.DecisionBlock}}
		}, "policy.rules[0].name", "[A-Za-z0-9_.-]"},
		{"duplicate rule name", func(d *tool.Definition) {
			d.Policy.Rules = []tool.Rule{{Name: "r", When: "true", Decision: tool.DecisionBlock}, {Name: "r", When: "false", Decision: tool.DecisionBlock}}
		}, "policy.rules[1].name", "earlier rule"},
		{"too many rules", func(d *tool.Definition) {
			d.Policy.Rules = make([]tool.Rule, tool.MaxRules+1)
		}, "policy.rules", "at most"},
		{"negative timeout", func(d *tool.Definition) { d.TimeoutMS = -1 }, "timeout_ms", "between 1 and 3600000"},
		{"timeout too long", func(d *tool.Definition) { d.TimeoutMS = tool.MaxTimeoutMS + 1 }, "timeout_ms", "got 3600001"},
		{"negative approval timeout", func(d *tool.Definition) { d.ApprovalTimeoutMS = -5 }, "approval_timeout_ms", "between 1 and 604800000"},
		{"approval timeout too long", func(d *tool.Definition) { d.ApprovalTimeoutMS = tool.MaxApprovalTimeoutMS + 1 }, "approval_timeout_ms", "between 1"},
		{"bad on_failure", func(d *tool.Definition) { d.OnFailure = "retry" }, "on_failure", `not "retry"`},
		{"empty agent id", func(d *tool.Definition) { d.Agents = []string{"a", ""} }, "agents[1]", "agent id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := transferDef()
			tc.edit(&d)
			tl, err := tool.Compile(d)
			if err == nil {
				t.Fatalf("Compile accepted it: %+v", tl.Def)
			}
			var ve *tool.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error is %T, want *ValidationError: %v", err, err)
			}
			if ve.Field != tc.field {
				t.Errorf("Field = %q, want %q (%v)", ve.Field, tc.field, err)
			}
			if !strings.Contains(ve.Message, tc.substr) {
				t.Errorf("Message = %q, want it to contain %q", ve.Message, tc.substr)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Error() = %q does not name the field", err)
			}
		})
	}
}

// Names that do round-trip through FunctionName are accepted, including
// the longest that fits.
func TestCompileAcceptsNames(t *testing.T) {
	for _, name := range []string{"a", "A-b_c.d", "x._y", "a..b", "_lead", "trail_", strings.Repeat("n", 64), strings.Repeat("a.", 21) + "b"} {
		if _, err := tool.Compile(tool.Definition{Name: name, Kind: tool.KindClient}); err != nil {
			t.Errorf("Compile(%q): %v", name, err)
		}
	}
}

// call_<agent> tools (issue 9): kind agent only for call_ names (and call_
// names only with kind agent), fixed parameters, no timeout and
// return_to_agent by default, no agents list.
func TestCompileAgentTool(t *testing.T) {
	tl, err := tool.Compile(tool.Definition{Name: "call_planner", Kind: tool.KindAgent})
	if err != nil {
		t.Fatal(err)
	}
	if string(tl.Def.Parameters) != tool.AgentToolParameters || tl.Def.TimeoutMS != 0 || tl.Def.OnFailure != tool.OnFailureReturnToAgent ||
		tl.Def.ApprovalTimeoutMS != tool.DefaultApprovalTimeoutMS || tl.Def.Policy.Decision != tool.DecisionAllow {
		t.Fatalf("defaults: %+v", tl.Def)
	}
	if err := tl.ValidateArgs([]byte(`{"message":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{}`, `{"message":1}`, `{"message":"hi","extra":true}`} {
		if err := tl.ValidateArgs([]byte(bad)); err == nil {
			t.Errorf("args %s accepted", bad)
		}
	}
	tl, err = tool.Compile(tool.Definition{Name: "call_planner", Kind: tool.KindAgent, TimeoutMS: 5000, OnFailure: tool.OnFailureFailRun, Parameters: []byte(tool.AgentToolParameters)})
	if err != nil || tl.Def.TimeoutMS != 5000 || tl.Def.OnFailure != tool.OnFailureFailRun {
		t.Fatalf("override: %+v, %v", tl, err)
	}
	for name, d := range map[string]tool.Definition{
		"agent kind, other name":   {Name: "planner", Kind: tool.KindAgent},
		"call_ name, server kind":  {Name: "call_planner", Kind: tool.KindServer, Endpoint: "http://x"},
		"call_ name, client kind":  {Name: "call_planner", Kind: tool.KindClient},
		"endpoint":                 {Name: "call_planner", Kind: tool.KindAgent, Endpoint: "http://x"},
		"other parameters":         {Name: "call_planner", Kind: tool.KindAgent, Parameters: []byte(`{"type":"object"}`)},
		"agents list":              {Name: "call_planner", Kind: tool.KindAgent, Agents: []string{"a"}},
		"timeout out of range":     {Name: "call_planner", Kind: tool.KindAgent, TimeoutMS: tool.MaxTimeoutMS + 1},
		"function name too long":   {Name: "call_" + strings.Repeat("a", 60), Kind: tool.KindAgent},
		"name maps back elsewhere": {Name: "call__x", Kind: tool.KindAgent},
	} {
		if _, err := tool.Compile(d); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}

// An agent id is refused at registration when its call_<agent_id> tool
// could not be offered or called.
func TestCheckAgentID(t *testing.T) {
	for id, ok := range map[string]bool{
		"weather": true, "team.weather": true, "a_b": true, "a-b": true, "a.b.c": true,
		strings.Repeat("a", 59): true, strings.Repeat("a", 60): false,
		"x__y": false, "x_.y": false, "x--y": false,
	} {
		if err := tool.CheckAgentID(id); (err == nil) != ok {
			t.Errorf("CheckAgentID(%q) = %v, want ok %v", id, err, ok)
		}
	}
}
