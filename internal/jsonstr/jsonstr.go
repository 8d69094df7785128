// Package jsonstr writes JSON strings byte for byte as encoding/json does,
// without its reflection and allocations for the common case: a string
// encoding/json copies unchanged between its quotes (ids, model names, a
// streamed token of text) is copied here too; anything it would escape is
// handed to encoding/json itself.
package jsonstr

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Plain reports whether encoding/json writes s between quotes unchanged:
// no control character, quote, backslash or HTML character (<, >, &), and,
// beyond ASCII, valid UTF-8 without U+2028 or U+2029 (which it escapes).
func Plain(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return ascii || utf8.ValidString(s) && !strings.ContainsRune(s, '\u2028') && !strings.ContainsRune(s, '\u2029')
}

// Append appends s as encoding/json quotes it.
func Append(b []byte, s string) []byte {
	if !Plain(s) {
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
