package agent

import "unicode/utf8"

// plainDeltaText is the text of a delta event's data when it is the
// common plain form — {"text":"…"} with optional whitespace between the
// tokens and a string without escapes or control characters, in valid
// UTF-8 — and ok false otherwise (the caller then decodes it with
// encoding/json, which gives the same text for every input this accepts).
//
// A streaming agent sends one delta per token or so: encoding/json's
// reflection and its copies were a twentieth of the server's CPU per
// delivered event (issue 13). The text is a substring of data, no copy.
func plainDeltaText(data string) (text string, ok bool) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return "", false
	}
	i = skipSpace(data, i+1)
	const key = `"text"`
	if len(data)-i < len(key) || data[i:i+len(key)] != key {
		return "", false
	}
	i = skipSpace(data, i+len(key))
	if i == len(data) || data[i] != ':' {
		return "", false
	}
	i = skipSpace(data, i+1)
	if i == len(data) || data[i] != '"' {
		return "", false
	}
	start := i + 1
	end := start
	for ; end < len(data); end++ {
		c := data[end]
		if c == '"' {
			break
		}
		if c == '\\' || c < 0x20 {
			return "", false
		}
	}
	if end == len(data) {
		return "", false
	}
	i = skipSpace(data, end+1)
	if i == len(data) || data[i] != '}' {
		return "", false
	}
	if skipSpace(data, i+1) != len(data) {
		return "", false
	}
	text = data[start:end]
	if !utf8.ValidString(text) {
		return "", false
	}
	return text, true
}

// skipSpace is the index of the first byte at or after i that is not JSON
// whitespace.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}
