package sqlstore

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// PostgreSQL's text type refuses two things a Go string can hold and SQLite
// keeps: the NUL byte and invalid UTF-8 (issue 8: a delta "a\u0000b" failed
// its run on PostgreSQL only, a transcript message with U+0000 answered
// 500). Refusing them would make the stores differ in what they accept, so
// on dialects with EscapeText the store escapes such strings on the way in
// and unescapes them on the way out — every string argument and every
// string (or JSON) column, identifiers included, so lookups by an odd value
// match what was stored. Strings without NUL, invalid UTF-8 or a leading
// textMark, i.e. everything ordinary, are stored unchanged, so existing rows,
// indexes and ordering are unaffected.
//
// An escaped string is textMark followed by the original with these
// replacements (textMark is U+FDD0, a Unicode noncharacter: valid UTF-8 that
// PostgreSQL accepts and that text in the wild does not start with):
//
//	NUL byte              -> textMark '0'
//	textMark              -> textMark 'm'
//	invalid UTF-8 byte b  -> textMark 'x' and b as two hex digits
//
// The mapping is injective, so equality in SQL still means equality of the
// original strings. JSON text never starts with textMark, so JSON columns
// share the codec.
const textMark = "\ufdd0"

// needsEscape reports whether s cannot be stored as it is: it holds a NUL
// or invalid UTF-8, or it starts with textMark and would read back as an
// escaped string.
func needsEscape(s string) bool {
	return strings.HasPrefix(s, textMark) || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)
}

const hexDigits = "0123456789abcdef"

// escapeText returns s as it is stored on an EscapeText dialect.
func escapeText(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(textMark) + 8)
	b.WriteString(textMark)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0:
			b.WriteString(textMark + "0")
			i++
			continue
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(textMark + "x")
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		case r == '\ufdd0':
			b.WriteString(textMark + "m")
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unescapeText reverses escapeText. A value that starts with textMark but is
// not what escapeText makes of anything (a row written before the codec
// existed) is returned as it is.
func unescapeText(s string) string {
	if !strings.HasPrefix(s, textMark) {
		return s
	}
	out, ok := unescape([]byte(s[len(textMark):]))
	if !ok || escapeText(string(out)) != s {
		return s
	}
	return string(out)
}

// unescapeJSON is unescapeText for a JSON column's bytes (b itself when it
// is not escaped).
func unescapeJSON(b []byte) []byte {
	if !bytes.HasPrefix(b, []byte(textMark)) {
		return b
	}
	return []byte(unescapeText(string(b)))
}

func unescape(body []byte) ([]byte, bool) {
	out := make([]byte, 0, len(body))
	for {
		i := bytes.Index(body, []byte(textMark))
		if i < 0 {
			return append(out, body...), true
		}
		out = append(out, body[:i]...)
		body = body[i+len(textMark):]
		if len(body) == 0 {
			return nil, false
		}
		switch body[0] {
		case '0':
			out = append(out, 0)
			body = body[1:]
		case 'm':
			out = append(out, textMark...)
			body = body[1:]
		case 'x':
			if len(body) < 3 {
				return nil, false
			}
			hi, lo := strings.IndexByte(hexDigits, body[1]), strings.IndexByte(hexDigits, body[2])
			if hi < 0 || lo < 0 {
				return nil, false
			}
			out = append(out, byte(hi<<4|lo))
			body = body[3:]
		default:
			return nil, false
		}
	}
}
