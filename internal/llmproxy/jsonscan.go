package llmproxy

import (
	"bytes"
	"errors"
)

// A tiny, allocation-free JSON scanner. The proxy must not decode whole
// request or response bodies on the hot path (a chat request can carry
// megabytes of history, an embeddings response megabytes of floats); it only
// needs to find a few top-level members and the "usage" object. These
// functions find value spans; they do not validate what they skip — the
// upstream does that and answers with its own 400, which we pass through.

var errBadJSON = errors.New("malformed JSON")

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string starting at b[i]
// (b[i] == '"'), or -1 if it is unterminated.
func stringEnd(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		// The quote is escaped iff it is preceded by an odd number of backslashes.
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the index just past the JSON value starting at b[i]
// (i must point at the value's first byte), or -1 if it is truncated.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
				break
			}
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// span is a half-open byte range [start, end) of a JSON value; start < 0
// means absent.
type span struct{ start, end int }

func (s span) ok() bool { return s.start >= 0 }

var absent = span{-1, -1}

// scanObject walks the members of the top-level JSON object in b and calls fn
// with each raw key (without quotes, escapes left as they are) and the span
// of its value. fn returns false to stop early. It returns the index of the
// object's opening brace.
func scanObject(b []byte, fn func(key []byte, v span) bool) (int, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return -1, errBadJSON
	}
	open := i
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return open, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return open, errBadJSON
		}
		ke := stringEnd(b, i)
		if ke < 0 {
			return open, errBadJSON
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return open, errBadJSON
		}
		i = skipSpace(b, i+1)
		ve := valueEnd(b, i)
		if ve < 0 {
			return open, errBadJSON
		}
		if !fn(key, span{i, ve}) {
			return open, nil
		}
		i = skipSpace(b, ve)
		if i >= len(b) {
			return open, errBadJSON
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return open, nil
		default:
			return open, errBadJSON
		}
	}
}

// findMember returns the span of the value of key in the top-level object b.
func findMember(b []byte, key string) span {
	found := absent
	_, _ = scanObject(b, func(k []byte, v span) bool {
		if string(k) == key {
			found = v
			return false
		}
		return true
	})
	return found
}

// findUsageObject returns the span of the last `"usage": {…}` object in b, a
// JSON document or SSE event. It is a scan, not a parse: in the OpenAI wire
// format "usage" is only ever a key (a quote inside a string value is
// escaped), and the usage object of chat chunks, chat completions, embeddings
// and Responses API events is the last one in the text.
func findUsageObject(b []byte) span {
	u, _ := scanKeys(b)
	return u
}

// scanKeys finds, in one pass over b (a JSON document or SSE event), the
// span of the last `"usage": {…}` object (see findUsageObject) and whether
// an "error" key anywhere has an object or a string for its value, or an
// "object" key has the value "error" (vLLM's error chunk, below). It goes
// from colon to colon and looks at the key before each: a chunk has few
// colons besides its keys' but quotes everywhere, which makes a search for
// a key that starts with one several times slower (bytes.Index falls back
// to its brute force), and the two keys cost one pass, not two.
var errorValue = []byte(`"error"`)

func scanKeys(b []byte) (usage span, hasError bool) {
	usage = absent
	for off := 0; ; {
		k := bytes.IndexByte(b[off:], ':')
		if k < 0 {
			return usage, hasError
		}
		colon := off + k
		off = colon + 1
		q := colon - 1
		for q >= 0 && isSpace(b[q]) {
			q--
		}
		if q < 6 || b[q] != '"' {
			continue
		}
		switch string(b[q-6 : q+1]) {
		case `"usage"`:
			i := skipSpace(b, colon+1)
			if i < len(b) && b[i] == '{' {
				if e := valueEnd(b, i); e > 0 {
					usage = span{i, e}
					off = e
				}
			}
		case `"error"`:
			i := skipSpace(b, colon+1)
			hasError = hasError || i < len(b) && (b[i] == '{' || b[i] == '"')
		case `object"`:
			// vLLM (before it took OpenAI's {"error":{…}}) ends a failing
			// stream with its ErrorResponse, {"object":"error","message":…}.
			if q >= 7 && b[q-7] == '"' {
				i := skipSpace(b, colon+1)
				hasError = hasError || bytes.HasPrefix(b[i:], errorValue)
			}
		}
	}
}

var choicesKey = []byte(`"choices"`)

// hasEmptyChoices reports whether b contains `"choices": []`, the mark of the
// usage-only chunk OpenAI appends to a stream when include_usage is set.
func hasEmptyChoices(b []byte) bool {
	k := bytes.Index(b, choicesKey)
	if k < 0 {
		return false
	}
	i := skipSpace(b, k+len(choicesKey))
	if i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipSpace(b, i+1)
	if i >= len(b) || b[i] != '[' {
		return false
	}
	i = skipSpace(b, i+1)
	return i < len(b) && b[i] == ']'
}

var finishReasonKey = []byte(`"finish_reason"`)

// hasFinishReason reports whether b, a chat chunk, has a finish_reason that
// is not null: a choice ended in it.
func hasFinishReason(b []byte) bool {
	for off := 0; ; {
		k := bytes.Index(b[off:], finishReasonKey)
		if k < 0 {
			return false
		}
		i := skipSpace(b, off+k+len(finishReasonKey))
		if i < len(b) && b[i] == ':' {
			if i = skipSpace(b, i+1); i < len(b) && b[i] == '"' {
				return true
			}
		}
		off += k + len(finishReasonKey)
	}
}

// memberCut returns the span to cut from the JSON object b to remove its
// top-level member key, whose value must be an object, leaving the same
// JSON without it: from the end of the previous member's value through this
// one's, or, for the first member, from its key through the next key.
// Absent when b has no such member.
func memberCut(b []byte, key string) span {
	prevEnd := -1 // the end of the previous member's value
	cut := absent
	open, err := scanObject(b, func(k []byte, v span) bool {
		if string(k) == key {
			if b[v.start] == '{' {
				cut = span{prevEnd, v.end}
			}
			return false
		}
		prevEnd = v.end
		return true
	})
	if err != nil || cut.end < 0 {
		return absent
	}
	if cut.start >= 0 {
		return cut
	}
	cut.start = skipSpace(b, open+1)
	if i := skipSpace(b, cut.end); i < len(b) && b[i] == ',' {
		cut.end = skipSpace(b, i+1)
	}
	return cut
}
