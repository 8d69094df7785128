package tool

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func redactTool(t *testing.T, paths ...string) *Tool {
	t.Helper()
	tl, err := Compile(Definition{Name: "pay", Kind: KindServer, Endpoint: "http://x", Redact: paths})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestRedactArgs(t *testing.T) {
	tl := redactTool(t, "card.number", "cards.*.cvv", "token", "deep.*")
	for in, want := range map[string]string{
		// Keys keep their order and numbers their spelling; only the named values change.
		`{"amount":12.50,"card":{"number":"4111 1111","exp":"12/30"},"to":"bob"}`: `{"amount":12.50,"card":{"number":"[redacted]","exp":"12/30"},"to":"bob"}`,
		`{"cards":[{"cvv":123,"n":1},{"n":2},{"cvv":"999"}]}`:                     `[{"cvv":"[redacted]","n":1},{"n":2},{"cvv":"[redacted]"}]`,
		`{"token":{"nested":"secret"},"x":1}`:                                     `{"token":"[redacted]","x":1}`,
		`{"deep":{"a":1,"b":[2]}}`:                                                `{"deep":{"a":"[redacted]","b":"[redacted]"}}`,
		`{"card":"not an object","other":1}`:                                      `{"card":"not an object","other":1}`,
		`{}`:                                                                      `{}`,
	} {
		got, changed := tl.RedactArgs(json.RawMessage(in))
		if strings.HasPrefix(want, "[") {
			// Arrays are re-encoded compactly; compare under "cards".
			var m map[string]json.RawMessage
			if err := json.Unmarshal(got, &m); err != nil || string(m["cards"]) != want || !changed {
				t.Errorf("%s -> %s (changed %v), want cards %s", in, got, changed, want)
			}
			continue
		}
		if string(got) != want || changed != (in != want) {
			t.Errorf("%s -> %s (changed %v), want %s", in, got, changed, want)
		}
	}
	if got, changed := redactTool(t).RedactArgs(json.RawMessage(`{"a":1}`)); changed || string(got) != `{"a":1}` {
		t.Errorf("a tool without paths changed args: %s", got)
	}
}

func TestRedactValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		d    Definition
		want string
	}{
		"client": {Definition{Name: "c", Kind: KindClient, Redact: []string{"x"}}, "server and MCP tools only"},
		"agent":  {Definition{Name: "call_x", Kind: KindAgent, Redact: []string{"message"}}, "server and MCP tools only"},
		"empty":  {Definition{Name: "s", Kind: KindServer, Endpoint: "http://x", Redact: []string{""}}, "redact[0]"},
		"dots":   {Definition{Name: "s", Kind: KindServer, Endpoint: "http://x", Redact: []string{"a..b"}}, "empty segment"},
		"many":   {Definition{Name: "s", Kind: KindServer, Endpoint: "http://x", Redact: make([]string, 33)}, "at most 32"},
	} {
		_, err := Compile(tc.d)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.HasPrefix(ve.Field, "redact") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a redact error with %q", name, err, tc.want)
		}
	}
}
