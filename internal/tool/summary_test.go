package tool_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentplane/agentplane/internal/tool"
)

func TestArgsSummary(t *testing.T) {
	tl := mustCompile(t, transferDef())
	cases := []struct{ name, args, want string }{
		{"typical", `{"amount": 150, "to": "bob"}`, `payments.transfer(amount=150, to="bob")`},
		{"order kept", `{"to": "bob", "amount": 1.50}`, `payments.transfer(to="bob", amount=1.50)`},
		{"empty", `{}`, `payments.transfer()`},
		{"nested compact", `{"a": {"b": [1, 2, {"c": null}]}, "ok": true}`, `payments.transfer(a={"b":[1,2,{"c":null}]}, ok=true)`},
		{"control chars quoted", `{"memo": "line1\nline2\"),x=(\"", "t": "<b>"}`, `payments.transfer(memo="line1\nline2\"),x=(\"", t="<b>")`},
		{"odd key quoted", `{"a b=c": 1, "": 2}`, `payments.transfer("a b=c"=1, ""=2)`},
		{"array args", `[1, 2]`, `payments.transfer([1,2])`},
		{"scalar args", ` "hi" `, `payments.transfer("hi")`},
		{"null args", `null`, `payments.transfer(null)`},
		{"invalid", `{"amount": `, `payments.transfer(<invalid JSON>)`},
		{"nil", ``, `payments.transfer(<invalid JSON>)`},
		{"long value cut", `{"memo": "` + strings.Repeat("x", 100) + `", "to": "bob"}`,
			`payments.transfer(memo="` + strings.Repeat("x", 59) + `…", to="bob")`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tl.ArgsSummary(json.RawMessage(tc.args)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestArgsSummaryBounded(t *testing.T) {
	tl := mustCompile(t, transferDef())
	var b strings.Builder
	b.WriteString("{")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("é", i%7) + `": "日本語のテキスト"`)
	}
	b.WriteString("}")
	got := tl.ArgsSummary(json.RawMessage(b.String()))
	if n := utf8.RuneCountInString(got); n != 200 {
		t.Errorf("summary has %d runes, want 200: %s", n, got)
	}
	if !strings.HasPrefix(got, "payments.transfer(k=") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("summary = %s", got)
	}
	// Invalid UTF-8 inside a string value is replaced, never passed on.
	if got := tl.ArgsSummary(json.RawMessage("{\"a\": \"\xff\"}")); !utf8.ValidString(got) {
		t.Errorf("invalid UTF-8 passed through: %q", got)
	}
}

// ArgsSummary and ValidateArgs never panic, and the summary stays bounded
// and valid UTF-8, whatever the bytes.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{
		`{"amount": 150, "to": "bob"}`, `{}`, `[]`, `null`, `"x"`, `{"a":{"b":[1,{"c":"\u00e9"}]}}`,
		`{"amount": 1e400}`, `{"a": "\ud800"}`, "{\"\xff\": 1}", `{"a":1,"a":2}`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	tl := mustCompile(f, transferDef())
	f.Fuzz(func(t *testing.T, data []byte) {
		s := tl.ArgsSummary(data)
		if utf8.RuneCountInString(s) > 200 || !utf8.ValidString(s) {
			t.Fatalf("summary %q: %d runes, valid UTF-8 %v", s, utf8.RuneCountInString(s), utf8.ValidString(s))
		}
		err := tl.ValidateArgs(data)
		if err == nil && !json.Valid(data) {
			t.Fatalf("ValidateArgs accepted invalid JSON %q", data)
		}
		if m, err := tool.DecodeArgs(data); err == nil {
			_, _ = tl.Decide(tool.Input{Args: m})
		}
	})
}
