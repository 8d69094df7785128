package run

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// textPayload is the payload {"text":text} of a stream delta or a child's
// partial, byte for byte what encoding/json writes for it. Text that JSON
// carries as is (no quote, backslash, control character, HTML character,
// invalid UTF-8 or line separator: encoding/json escapes each) is copied
// into one buffer of the right size; anything else goes to encoding/json.
// A delta is a token or so, and every one is encoded (issue 13).
func textPayload(text string) []byte {
	if !plainJSONString(text) {
		b, _ := json.Marshal(struct {
			Text string `json:"text"`
		}{text})
		return b
	}
	const open, end = `{"text":"`, `"}`
	b := make([]byte, 0, len(open)+len(text)+len(end))
	b = append(b, open...)
	b = append(b, text...)
	return append(b, end...)
}

// plainJSONString reports whether encoding/json writes s between quotes
// unchanged.
func plainJSONString(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		case c >= 0x80:
			ascii = false
		}
	}
	return ascii || utf8.ValidString(s) && !strings.ContainsRune(s, '\u2028') && !strings.ContainsRune(s, '\u2029')
}
