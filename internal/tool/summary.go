package tool

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

const (
	// maxSummaryLen bounds ArgsSummary, in characters (runes).
	maxSummaryLen = 200
	// maxSummaryValueLen bounds one value inside a summary so that one long
	// argument does not push every other one out of view.
	maxSummaryValueLen = 60
	ellipsis           = "…"
)

// ArgsSummary renders a call for a human deciding an approval, e.g.
// `payments.transfer(amount=150, to="bob")`: the args in the order they were
// sent, strings JSON-quoted (so control characters and quotes cannot forge
// the text around them), nested values as compact JSON, each value cut at 60
// characters and the whole at 200, with "…" where something was cut. Args
// that are not a JSON object are shown as they are (or as "<invalid JSON>").
// It never panics.
func (t *Tool) ArgsSummary(args json.RawMessage) string {
	var b strings.Builder
	b.WriteString(t.Def.Name)
	b.WriteByte('(')
	b.WriteString(summarizeArgs(args))
	b.WriteByte(')')
	return truncateRunes(b.String(), maxSummaryLen)
}

// summarizeArgs renders the inside of the parentheses.
func summarizeArgs(args json.RawMessage) string {
	if !json.Valid(args) {
		return "<invalid JSON>"
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return "<invalid JSON>"
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return summarizeValue(bytes.TrimSpace(args))
	}
	var b strings.Builder
	for i := 0; dec.More(); i++ {
		// Stop reading once the summary is already too long to show more:
		// the args can be megabytes.
		if utf8.RuneCountInString(b.String()) > maxSummaryLen {
			break
		}
		keyTok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := keyTok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(summarizeKey(key))
		b.WriteByte('=')
		b.WriteString(summarizeValue(val))
	}
	return b.String()
}

// summarizeKey shows a key bare when it is a plain identifier-like word and
// JSON-quoted otherwise, so a key cannot smuggle "=" or ", " into the text.
func summarizeKey(k string) string {
	plain := k != ""
	for _, r := range k {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			plain = false
			break
		}
	}
	if plain {
		return truncateRunes(k, maxSummaryValueLen)
	}
	return quoteJSON(truncateRunes(k, maxSummaryValueLen))
}

// summarizeValue renders one JSON value: strings re-quoted after being cut
// (cutting the quoted form could split an escape sequence), anything else as
// compact JSON, cut.
func summarizeValue(val json.RawMessage) string {
	var s string
	if len(val) > 0 && val[0] == '"' && json.Unmarshal(val, &s) == nil {
		return quoteJSON(truncateRunes(s, maxSummaryValueLen))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, val); err != nil {
		return "<invalid JSON>"
	}
	return truncateRunes(compact.String(), maxSummaryValueLen)
}

// quoteJSON quotes s as a JSON string without HTML escaping: the summary is
// text for a person, and the UI escapes it for its own context.
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return `""`
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// truncateRunes cuts s to at most n runes, ending in "…" when it was cut.
// Invalid UTF-8 is replaced so the result is always valid.
func truncateRunes(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return s[:i] + ellipsis
}
