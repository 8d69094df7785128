package tool

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
)

// minScrubbed is the shortest redacted value replaced inside a text; a
// shorter one ("42", "ab") would also match unrelated parts of a message, so
// a text containing one is withheld instead.
const minScrubbed = 4

// withheldText stands for a text that may show a redacted value.
const withheldText = "(withheld: the message may show a redacted argument)"

// scrubRedacted returns text — a policy rule's error message, which CEL
// builds from the values it evaluated ("no such key: 4111…"), or a schema
// check's, which quotes the value it refused ("'4111…' does not match
// pattern …") — with every value at the tool's redaction paths in args
// replaced by "[redacted]", or withheld where a piece of one remains, so a
// redacted value never reaches the policy_decision event, an invalid_args
// answer or the log (DESIGN §15). args are the decoded args the text was
// built from (numbers as float64 or json.Number).
func (t *Tool) scrubRedacted(args map[string]any, text string) string {
	if len(t.Def.Redact) == 0 {
		return text
	}
	var secrets []string
	for _, p := range t.Def.Redact {
		collectAt(args, strings.Split(p, "."), &secrets)
	}
	// Longest first, so a value containing another is replaced whole.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		for _, f := range quotedForms(s) {
			if f == "" || !strings.Contains(text, f) {
				continue
			}
			if len(f) < minScrubbed {
				return withheldText
			}
			text = strings.ReplaceAll(text, f, Redacted)
		}
	}
	// A message may quote a piece of a value rather than all of it (a
	// regexp error names the fragment it choked on): any run of
	// minScrubbed characters of a redacted value withholds the message.
	for _, sec := range secrets {
		for i := 0; i+minScrubbed <= len(sec); i++ {
			if strings.Contains(text, sec[i:i+minScrubbed]) {
				return withheldText
			}
		}
	}
	return text
}

// quotedForms is s as it may appear inside a message: as it is, escaped
// the way CEL quotes it (Go's %q), and the way the schema library quotes
// it (%q, but with ' escaped and " not).
func quotedForms(s string) []string {
	forms := []string{s}
	q := strconv.Quote(s)
	q = q[1 : len(q)-1]
	if q != s {
		forms = append(forms, q)
	}
	if sq := strings.ReplaceAll(strings.ReplaceAll(q, `\"`, `"`), `'`, `\'`); sq != s && sq != q {
		forms = append(forms, sq)
	}
	return forms
}

// collectAt appends the text of every string and number at path below v
// ("*" = every element or value), and of every one inside an object or
// array there (its keys are not the secret).
func collectAt(v any, path []string, out *[]string) {
	if len(path) == 0 {
		collectScalars(v, out)
		return
	}
	switch x := v.(type) {
	case map[string]any:
		if path[0] == "*" {
			for _, e := range x {
				collectAt(e, path[1:], out)
			}
		} else if e, ok := x[path[0]]; ok {
			collectAt(e, path[1:], out)
		}
	case []any:
		if path[0] == "*" {
			for _, e := range x {
				collectAt(e, path[1:], out)
			}
		}
	}
}

func collectScalars(v any, out *[]string) {
	switch x := v.(type) {
	case string:
		*out = append(*out, x)
	case float64:
		*out = append(*out, numberForms(x)...)
	case json.Number:
		*out = append(*out, x.String())
		if f, err := x.Float64(); err == nil {
			*out = append(*out, numberForms(f)...)
		}
	case map[string]any:
		for _, e := range x {
			collectScalars(e, out)
		}
	case []any:
		for _, e := range x {
			collectScalars(e, out)
		}
	}
}

// numberForms is x as messages spell it: CEL's and Go's shortest and plain
// forms, and the schema library's, which prints through an English
// message.Printer ("1,234", "4.1×10¹⁵").
func numberForms(x float64) []string {
	return []string{strconv.FormatFloat(x, 'g', -1, 64), strconv.FormatFloat(x, 'f', -1, 64), printer.Sprintf("%v", x)}
}

// scrubbedError is err with a scrubbed text: errors.Is and As still see err
// (a rule stopped by the deadline is still context.DeadlineExceeded), its
// text never shows a redacted value.
type scrubbedError struct {
	text string
	err  error
}

func (e scrubbedError) Error() string { return e.text }
func (e scrubbedError) Unwrap() error { return e.err }
