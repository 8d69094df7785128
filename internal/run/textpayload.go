package run

import "github.com/agentplane/agentplane/internal/jsonstr"

// textPayload is the payload {"text":text} of a stream delta or a child's
// partial, byte for byte what encoding/json writes for it, in one buffer of
// the right size when the text needs no escapes (jsonstr). A delta is a
// token or so, and every one is encoded (issue 13).
func textPayload(text string) []byte {
	const open, end = `{"text":`, `}`
	b := make([]byte, 0, len(open)+len(text)+2+len(end))
	b = jsonstr.Append(append(b, open...), text)
	return append(b, end...)
}
