package tool_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/tool"
)

func TestValidateArgs(t *testing.T) {
	tl := mustCompile(t, transferDef())
	cases := []struct {
		name   string
		args   string
		path   string // "" means the args object itself
		substr string
		ok     bool
	}{
		{name: "valid", args: `{"amount": 150, "to": "bob"}`, ok: true},
		{name: "valid with optional", args: `{"amount": 0.5, "to": "bob", "memo": "rent", "tags": ["a"]}`, ok: true},
		{name: "missing required", args: `{"amount": 150}`, path: "", substr: "missing property 'to'"},
		{name: "two missing", args: `{}`, path: "", substr: "missing properties 'amount', 'to'"},
		{name: "wrong type", args: `{"amount": "150", "to": "bob"}`, path: "/amount", substr: "got string, want number"},
		{name: "nested wrong type", args: `{"amount": 1, "to": "bob", "tags": ["a", 2]}`, path: "/tags/1", substr: "want string"},
		{name: "out of range", args: `{"amount": 0, "to": "bob"}`, path: "/amount", substr: "exclusiveMinimum"},
		{name: "additionalProperties false", args: `{"amount": 1, "to": "bob", "extra": true}`, path: "", substr: "additional properties 'extra' not allowed"},
		{name: "several problems", args: `{"amount": "x", "to": 5}`, path: "/amount", substr: "(and 1 more problem)"},
		{name: "array", args: `[1, 2]`, substr: "must be a JSON object, got an array"},
		{name: "string", args: `"hi"`, substr: "must be a JSON object, got a string"},
		{name: "null", args: `null`, substr: "must be a JSON object, got null"},
		{name: "not JSON", args: `{"amount":`, substr: "not valid JSON"},
		{name: "trailing garbage", args: `{} {}`, substr: "not valid JSON"},
		{name: "empty", args: ``, substr: "not valid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tl.ValidateArgs(json.RawMessage(tc.args))
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateArgs: %v", err)
				}
				return
			}
			var ae *tool.ArgsError
			if !errors.As(err, &ae) {
				t.Fatalf("error is %T, want *ArgsError: %v", err, err)
			}
			if ae.Path != tc.path {
				t.Errorf("Path = %q, want %q (%v)", ae.Path, tc.path, err)
			}
			if !strings.Contains(ae.Message, tc.substr) {
				t.Errorf("Message = %q, want it to contain %q", ae.Message, tc.substr)
			}
		})
	}
}

// Local references and $defs work; integer checks are exact beyond float64.
func TestValidateArgsSchemaFeatures(t *testing.T) {
	d := tool.Definition{Name: "orders.place", Kind: tool.KindClient, Parameters: json.RawMessage(`{
		"type": "object",
		"$defs": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"}},
		"properties": {
			"sku": {"$ref": "#/$defs/sku"},
			"qty": {"type": "integer", "maximum": 9007199254740993}
		}
	}`)}
	tl := mustCompile(t, d)
	if err := tl.ValidateArgs(json.RawMessage(`{"sku": "ABC-12", "qty": 9007199254740993}`)); err != nil {
		t.Errorf("valid args refused: %v", err)
	}
	err := tl.ValidateArgs(json.RawMessage(`{"sku": "abc"}`))
	var ae *tool.ArgsError
	if !errors.As(err, &ae) || ae.Path != "/sku" {
		t.Errorf("pattern via $ref: got %v, want an ArgsError at /sku", err)
	}
	// 2^53+2 is above the maximum; a float64 comparison would round it equal.
	err = tl.ValidateArgs(json.RawMessage(`{"qty": 9007199254740994}`))
	if !errors.As(err, &ae) || ae.Path != "/qty" {
		t.Errorf("exact maximum: got %v, want an ArgsError at /qty", err)
	}
	if err := tl.ValidateArgs(json.RawMessage(`{"qty": 1.5}`)); err == nil {
		t.Error("1.5 accepted as an integer")
	}
}

// A pointer token with "/" or "~" is escaped (RFC 6901).
func TestValidateArgsPathEscaping(t *testing.T) {
	d := tool.Definition{Name: "x", Kind: tool.KindClient, Parameters: json.RawMessage(`{
		"type": "object", "properties": {"a/b~c": {"type": "string"}}}`)}
	tl := mustCompile(t, d)
	err := tl.ValidateArgs(json.RawMessage(`{"a/b~c": 1}`))
	var ae *tool.ArgsError
	if !errors.As(err, &ae) || ae.Path != "/a~1b~0c" {
		t.Errorf("got %v (path %q), want path /a~1b~0c", err, ae.Path)
	}
}

func TestDecodeArgs(t *testing.T) {
	m, err := tool.DecodeArgs(json.RawMessage(`{"amount": 150, "to": "bob"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m["amount"] != 150.0 || m["to"] != "bob" {
		t.Errorf("DecodeArgs = %v", m)
	}
	// Numbers beyond float64 are valid JSON and args are kept as sent: the
	// call is not refused, and the policy sees what float64 makes of them.
	m, err = tool.DecodeArgs(json.RawMessage(`{"n": 1e999999, "card": {"m": -1e400}, "k": [1e-999, 2], "s": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m["n"] != math.Inf(1) || m["card"].(map[string]any)["m"] != math.Inf(-1) || m["k"].([]any)[0] != 0.0 || m["k"].([]any)[1] != 2.0 || m["s"] != "x" {
		t.Errorf("DecodeArgs of numbers beyond float64 = %v", m)
	}
	for _, bad := range []string{`null`, `[1]`, `"s"`, ``, `{`, `[1e999]`} {
		if _, err := tool.DecodeArgs(json.RawMessage(bad)); err == nil {
			t.Errorf("DecodeArgs(%q) accepted", bad)
		}
	}
}

// The schema library quotes the value it refuses ("'…' does not match
// pattern …", "maximum: got 1,234 …"); where the tool redacts that
// argument, the message — the agent's 400 invalid_args — shows
// "[redacted]" instead, or is withheld where a piece of the value would
// remain, as a policy rule's error is (DESIGN §15; an external audit found the pattern case).
func TestValidateArgsNeverShowsRedactedValues(t *testing.T) {
	tl := mustCompile(t, tool.Definition{
		Name: "pay", Kind: tool.KindServer, Endpoint: "http://x",
		Redact: []string{"card.number", "card.pin", "cards.*.cvv", "note"},
		Parameters: json.RawMessage(`{"type": "object", "properties": {
			"card": {"type": "object", "properties": {
				"number": {"type": "string", "pattern": "^[0-9]+$"},
				"pin": {"type": "number", "maximum": 999}}},
			"cards": {"type": "array", "items": {"type": "object", "properties": {"cvv": {"type": "string", "pattern": "^[0-9]{3}$"}}}},
			"note": {"type": "string", "pattern": "^[a-z]+$"},
			"to": {"type": "string", "pattern": "^[a-z]+$"}}}`),
	})
	for name, tc := range map[string]struct {
		args    string
		secrets []string
		path    string
		want    string // in the message; "" = withheld
	}{
		"pattern":           {`{"card": {"number": "SCHEMASECRET77x"}}`, []string{"SCHEMASECRET77x", "SECR"}, "/card/number", "'[redacted]' does not match pattern"},
		"number as printed": {`{"card": {"pin": 1234}}`, []string{"1,234", "1234"}, "/card/pin", "maximum: got [redacted], want 999"},
		"array element":     {`{"cards": [{"cvv": "12ab"}]}`, []string{"12ab"}, "/cards/0/cvv", "'[redacted]' does not match"},
		"quoted as escaped": {`{"note": "it's a secret"}`, []string{`it\'s a secret`, "secret"}, "/note", "'[redacted]' does not match"},
		"too short":         {`{"cards": [{"cvv": "x7"}]}`, []string{"x7"}, "/cards/0/cvv", ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := tl.ValidateArgs(json.RawMessage(tc.args))
			var ae *tool.ArgsError
			if !errors.As(err, &ae) || ae.Path != tc.path {
				t.Fatalf("err = %v, want an *ArgsError at %s", err, tc.path)
			}
			for _, text := range []string{ae.Error(), ae.Err.Error()} {
				for _, s := range tc.secrets {
					if strings.Contains(text, s) {
						t.Errorf("the error shows the redacted %q: %s", s, text)
					}
				}
			}
			if tc.want == "" && !strings.Contains(ae.Message, "withheld") {
				t.Errorf("Message = %q, want it withheld", ae.Message)
			}
			if tc.want != "" && !strings.Contains(ae.Message, tc.want) {
				t.Errorf("Message = %q, want %q", ae.Message, tc.want)
			}
		})
	}
	// A value the tool does not redact is quoted as the library wrote it.
	err := tl.ValidateArgs(json.RawMessage(`{"to": "Bob1"}`))
	if err == nil || !strings.Contains(err.Error(), "'Bob1' does not match") {
		t.Errorf("unredacted value: %v, want it quoted", err)
	}
	// encoding/json quotes a number it cannot hold; DecodeArgs takes it
	// (TestDecodeArgs) and, refusing broken args, does not quote it (its
	// error is an invalid_args answer too).
	if _, err := tool.DecodeArgs(json.RawMessage(`{"card": {"number": 12e999}, "x": }`)); err == nil || strings.Contains(err.Error(), "12e999") {
		t.Errorf("DecodeArgs of broken args with a huge number: %v, want an error without it", err)
	}
}
