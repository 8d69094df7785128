package tool_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/tool"
)

const fullYAML = `
tools:
  - tool_name: payments.transfer
    kind: server
    description: Move money between accounts.
    endpoint: http://payments.internal/transfer
    timeout_ms: 5000
    approval_timeout_ms: 3600000
    on_failure: return_to_agent
    agents: [treasury, assistant]
    parameters:
      type: object
      required: [amount, to]
      additionalProperties: false
      properties:
        amount: {type: number, exclusiveMinimum: 0, maximum: 1e6}
        to:
          type: string
          enum: [alice, bob, "mallory"]
        when: {type: string, default: 2024-01-02}
        flags:
          type: array
          items: {type: boolean}
          maxItems: 3
        beneficiary:
          type: object
          required: [iban]
          properties:
            iban: {type: string, pattern: "^[A-Z]{2}[0-9]{2}"}
            "null": {type: "null"}
    policy:
      decision: allow
      rules:
        - name: sanctioned
          when: args.to == "mallory"
          decision: block
        - when: args.amount > 100
          decision: require_approval
  - tool_name: ui.confirm
    kind: client
`

type configFile struct {
	Tools []tool.Definition `yaml:"tools"`
}

func TestYAMLFullTool(t *testing.T) {
	var cfg configFile
	if err := yaml.Unmarshal([]byte(fullYAML), &cfg); err != nil {
		t.Fatalf("yaml.Unmarshal: %v", err)
	}
	if len(cfg.Tools) != 2 {
		t.Fatalf("got %d tools", len(cfg.Tools))
	}
	d := cfg.Tools[0]
	if d.Name != "payments.transfer" || d.Kind != tool.KindServer || d.Endpoint != "http://payments.internal/transfer" ||
		d.TimeoutMS != 5000 || d.ApprovalTimeoutMS != 3_600_000 || d.OnFailure != tool.OnFailureReturnToAgent ||
		strings.Join(d.Agents, ",") != "treasury,assistant" || d.Description != "Move money between accounts." {
		t.Errorf("scalar fields: %+v", d)
	}
	if len(d.Policy.Rules) != 2 || d.Policy.Rules[0].Name != "sanctioned" || d.Policy.Rules[1].When != "args.amount > 100" {
		t.Errorf("policy: %+v", d.Policy)
	}

	// The parameters map became the equivalent JSON Schema.
	var schema map[string]any
	if err := json.Unmarshal(d.Parameters, &schema); err != nil {
		t.Fatalf("Parameters is not JSON: %v (%s)", err, d.Parameters)
	}
	props := schema["properties"].(map[string]any)
	if got := props["amount"].(map[string]any)["maximum"]; got != 1e6 {
		t.Errorf("maximum = %v (%T), want the number 1e6", got, got)
	}
	// A YAML timestamp stays the string it was written as.
	if got := props["when"].(map[string]any)["default"]; got != "2024-01-02" {
		t.Errorf("timestamp default = %#v, want \"2024-01-02\"", got)
	}
	iban := props["beneficiary"].(map[string]any)["properties"].(map[string]any)["iban"].(map[string]any)
	if iban["pattern"] != "^[A-Z]{2}[0-9]{2}" {
		t.Errorf("nested pattern = %v", iban["pattern"])
	}

	tl := mustCompile(t, d)
	ok := `{"amount": 150, "to": "bob", "flags": [true], "beneficiary": {"iban": "DE12x"}}`
	if err := tl.ValidateArgs(json.RawMessage(ok)); err != nil {
		t.Errorf("valid args: %v", err)
	}
	var ae *tool.ArgsError
	err := tl.ValidateArgs(json.RawMessage(`{"amount": 1, "to": "bob", "beneficiary": {"iban": "x"}}`))
	if !errors.As(err, &ae) || ae.Path != "/beneficiary/iban" {
		t.Errorf("nested pattern: got %v", err)
	}
	err = tl.ValidateArgs(json.RawMessage(`{"amount": 1, "to": "carol"}`))
	if !errors.As(err, &ae) || ae.Path != "/to" {
		t.Errorf("enum: got %v", err)
	}
	if got := decide(t, tl, tool.Input{Args: args(t, ok)}); got.Decision != tool.DecisionRequireApproval || got.Rule != "rule[1]" {
		t.Errorf("Decide = %+v", got)
	}

	client := mustCompile(t, cfg.Tools[1])
	if string(client.Def.Parameters) != `{"type":"object"}` {
		t.Errorf("client tool without parameters: %s", client.Def.Parameters)
	}
}

// Anchors and aliases inside parameters are expanded.
func TestYAMLAliases(t *testing.T) {
	src := `
tool_name: geo.route
kind: client
parameters:
  type: object
  properties:
    from: &point
      type: object
      required: [lat, lon]
      properties: {lat: {type: number}, lon: {type: number}}
    to: *point
`
	d := decodeYAML(t, src)
	tl := mustCompile(t, d)
	err := tl.ValidateArgs(json.RawMessage(`{"from": {"lat": 1, "lon": 2}, "to": {"lat": 1}}`))
	var ae *tool.ArgsError
	if !errors.As(err, &ae) || ae.Path != "/to" {
		t.Errorf("aliased schema: got %v", err)
	}
}

func decodeYAML(t *testing.T, src string) tool.Definition {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	d, err := tool.DefinitionFromYAML(&n)
	if err != nil {
		t.Fatalf("DefinitionFromYAML: %v", err)
	}
	return d
}

func TestYAMLErrors(t *testing.T) {
	cases := []struct {
		name, src, field, substr string
	}{
		{"unknown top-level field", "tool_name: a\nkind: client\ntimeout: 5\n", "timeout", "unknown field (line 3)"},
		{"misspelt policy decision", "tool_name: a\nkind: client\npolicy:\n  decison: block\n", "policy.decison", "unknown field (line 4)"},
		{"misspelt rule key", "tool_name: a\nkind: client\npolicy:\n  rules:\n    - if: 'true'\n      decision: block\n", "policy.rules[0].if", "unknown field"},
		{"merge into tool", "tool_name: a\n<<: {kind: client}\n", "<<", "merge keys"},
		{"not a mapping", "- a\n- b\n", "", "must be a YAML mapping"},
		{"wrong type", "tool_name: a\nkind: client\ntimeout_ms: soon\n", "", "cannot unmarshal"},
		{"fractional timeout", "tool_name: a\nkind: client\ntimeout_ms: 0.5\n", "timeout_ms", "whole number of milliseconds, got 0.5 (line 3)"},
		{"infinite approval timeout", "tool_name: a\nkind: client\napproval_timeout_ms: .inf\n", "approval_timeout_ms", "whole number"},
		{"non-finite number", "tool_name: a\nkind: client\nparameters:\n  type: object\n  maximum: .inf\n", "parameters", "JSON cannot represent"},
		{"merge in parameters", "tool_name: a\nkind: client\nparameters:\n  <<: {type: object}\n", "parameters", "merge key"},
		{"non-scalar key", "tool_name: a\nkind: client\nparameters:\n  ? [a, b]\n  : 1\n", "parameters", "non-scalar mapping key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(tc.src), &n); err != nil {
				t.Fatalf("yaml: %v", err)
			}
			_, err := tool.DefinitionFromYAML(&n)
			var ve *tool.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %T %v, want *ValidationError", err, err)
			}
			if ve.Field != tc.field || !strings.Contains(ve.Message, tc.substr) {
				t.Errorf("got field %q message %q, want %q containing %q", ve.Field, ve.Message, tc.field, tc.substr)
			}
		})
	}
}

// Aliases that expand exponentially are refused, not walked.
func TestYAMLAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("tool_name: a\nkind: client\nparameters:\n  type: object\n  x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("  x" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(b.String()), &n); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	_, err := tool.DefinitionFromYAML(&n)
	var ve *tool.ValidationError
	if !errors.As(err, &ve) || ve.Field != "parameters" || !strings.Contains(ve.Message, "too many aliases") {
		t.Errorf("got %v, want a parameters error about aliases", err)
	}
}
