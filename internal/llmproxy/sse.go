package llmproxy

import (
	"bytes"
	"encoding/json"
)

// The per-event work of a stream: metering, the usage the client did not ask
// for, and how the stream ended. It runs on every event of every stream, so
// the common event — a chat chunk with a few words, a Responses delta — costs
// one pass over it (scanKeys; a look at its first lines for a Responses
// event) and no allocation; everything else (errors, usage, terminal events)
// happens once per stream.

var doneMarker = []byte("[DONE]")

// inspect meters one SSE event and returns the part of it the client must not
// get (absent for none): the usage chunk we asked for on the client's behalf,
// whole, or the usage member of a chunk that also carries choices. It also
// notes how the stream ends (c.sawEnd, c.sawUsageEnd) and an error the
// upstream reports in it (c.failStream).
func (c *call) inspect(ev []byte) span {
	if !c.ep.chat {
		c.inspectResponses(ev)
		return absent
	}
	if len(ev) <= 32 && bytes.Contains(ev, doneMarker) {
		c.sawEnd = true
		return absent
	}
	u, hasError := scanKeys(ev)
	// OpenAI ends a failing stream with {"error":{…}} (its SDKs raise on
	// it); routers put the error beside the chunk's choices; older vLLM
	// sends its error object itself, {"object":"error","message":…}.
	if hasError {
		if e := errorMember(ev); e != nil {
			c.failStream(streamError(e))
		} else if data := sseData(ev); isErrorObject(data) {
			c.failStream(streamError(data))
		}
	}
	if !u.ok() {
		return absent
	}
	if us, ok := parseUsage(ev[u.start:u.end]); ok {
		c.usage, c.haveUsage = us, true
	}
	// With include_usage (always on upstream) OpenAI sends usage in a chunk
	// of its own after every choice finished; some routers put it in the
	// last chunk with choices instead, beside its finish_reason. Either
	// says the generation ended, [DONE] or not. Usage in other chunks (a
	// running count) does not.
	usageOnly := hasEmptyChoices(ev)
	if usageOnly || hasFinishReason(ev) {
		c.sawUsageEnd = true
	}
	switch {
	case !c.strip:
		return absent
	case usageOnly:
		return span{0, len(ev)}
	default:
		return usageMemberCut(ev)
	}
}

// inspectResponses meters one event of a Responses API stream. Only its
// terminal event — response.completed, .incomplete or .failed — ends the
// stream and carries the call's usage. Another event may hold a "usage" key
// too — a tool's parameter schema echoed in response.created — which must not
// pass for the end of a stream cut after it.
func (c *call) inspectResponses(ev []byte) {
	switch string(responsesEventType(ev)) {
	case "response.completed", "response.incomplete":
	case "response.failed":
		c.failStream(responseFailure(sseData(ev)))
	case "error":
		c.failStream(responsesErrorEvent(sseData(ev)))
		return
	default:
		return
	}
	c.sawEnd = true
	if u := findUsageObject(ev); u.ok() {
		if us, ok := parseUsage(ev[u.start:u.end]); ok {
			c.usage, c.haveUsage = us, true
		}
	}
}

// unendedMessage says what a stream that ended cleanly lacked to be complete.
func (c *call) unendedMessage() string {
	if c.ep.chat {
		return "upstream stream ended without data: [DONE] (nor the usage chunk that follows the last choice)"
	}
	return "upstream stream ended before its terminal event (response.completed, .incomplete or .failed)"
}

// responseFailure is the error of a response.failed event's response.
func responseFailure(data []byte) *CallError {
	if r := findMember(data, "response"); r.ok() && data[r.start] == '{' {
		obj := data[r.start:r.end]
		if e := findMember(obj, "error"); e.ok() && obj[e.start] == '{' {
			return streamError(obj[e.start:e.end])
		}
	}
	return &CallError{Code: CodeUpstreamStreamError, Message: "the upstream's response failed without an error object"}
}

// responsesErrorEvent is the error of a Responses API "error" event: the
// event's own code and message (its "type" is the event's), or an "error"
// object inside it, as some upstreams send.
func responsesErrorEvent(data []byte) *CallError {
	var ev struct {
		openAIError
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) == nil {
		if len(ev.Error) > 0 && ev.Error[0] == '{' {
			return streamError(ev.Error)
		}
		ev.Type = ""
		if e, ok := ev.callError(CodeUpstreamStreamError); ok {
			return e
		}
	}
	return notOpenAIStreamError(data)
}

// errorMember returns the value of the top-level "error" member of a chat
// stream event's data — an object or a non-empty string — or nil.
func errorMember(ev []byte) []byte {
	data := sseData(ev)
	v := findMember(data, "error")
	if !v.ok() || data[v.start] == 'n' || string(data[v.start:v.end]) == `""` {
		return nil
	}
	return data[v.start:v.end]
}

// isErrorObject reports whether data, a chat stream event's data, is an
// error object of vLLM's shape: its top-level "object" is "error" and it has
// a message.
func isErrorObject(data []byte) bool {
	v := findMember(data, "object")
	if !v.ok() || string(data[v.start:v.end]) != `"error"` {
		return false
	}
	m := findMember(data, "message")
	return m.ok() && data[m.start] == '"'
}

// usageMemberCut returns the span of ev that holds its data's top-level
// "usage" object with the separator it takes along, so that what is left is
// the same JSON without it; absent when there is none or the data is not on
// one line (every OpenAI-compatible upstream writes it on one).
func usageMemberCut(ev []byte) span {
	d, ok := dataLine(ev)
	if !ok {
		return absent
	}
	cut := memberCut(ev[d.start:d.end], "usage")
	if !cut.ok() {
		return absent
	}
	return span{d.start + cut.start, d.start + cut.end}
}

// responsesEventType is the type of a Responses API event: its "event:" line
// or, where an upstream sends none, the "type" its data starts with.
func responsesEventType(ev []byte) []byte {
	if typ := sseEventName(ev); typ != nil {
		return typ
	}
	return leadingType(ev)
}

var (
	eventPrefix = []byte("event:")
	dataPrefix  = []byte("data:")
	typePrefix  = []byte(`{"type":"`)
)

// sseEventName is the value of ev's "event:" line, or nil.
func sseEventName(ev []byte) []byte {
	for line := range bytes.Lines(ev) {
		if v, ok := bytes.CutPrefix(line, eventPrefix); ok {
			return bytes.TrimSpace(v)
		}
	}
	return nil
}

// leadingType is the "type" value a data line's JSON object starts with
// (the OpenAI wire format writes it first), or nil.
func leadingType(ev []byte) []byte {
	for line := range bytes.Lines(ev) {
		v, ok := bytes.CutPrefix(line, dataPrefix)
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		if !bytes.HasPrefix(v, typePrefix) {
			return nil
		}
		v = v[len(typePrefix):]
		if i := bytes.IndexByte(v, '"'); i >= 0 {
			return v[:i]
		}
		return nil
	}
	return nil
}

// dataLine returns the span of the value of ev's "data:" line (without the
// space after the colon and the line ending) when ev has exactly one.
func dataLine(ev []byte) (span, bool) {
	found := absent
	off := 0
	for line := range bytes.Lines(ev) {
		if v, ok := bytes.CutPrefix(line, dataPrefix); ok {
			if found.ok() {
				return absent, false
			}
			start := off + len(dataPrefix)
			if len(v) > 0 && v[0] == ' ' {
				start++
			}
			end := off + len(line)
			for end > start && (ev[end-1] == '\n' || ev[end-1] == '\r') {
				end--
			}
			found = span{start, end}
		}
		off += len(line)
	}
	return found, found.ok()
}

// sseData is the data of ev: its data lines joined by newlines, as the SSE
// specification reads them. One line — the usual case — is not copied.
func sseData(ev []byte) []byte {
	if d, ok := dataLine(ev); ok {
		return ev[d.start:d.end]
	}
	var data []byte
	n := 0
	for line := range bytes.Lines(ev) {
		v, ok := bytes.CutPrefix(line, dataPrefix)
		if !ok {
			continue
		}
		v = bytes.TrimRight(bytes.TrimPrefix(v, []byte(" ")), "\r\n")
		if n > 0 {
			data = append(data, '\n')
		}
		data = append(data, v...)
		n++
	}
	return data
}

// eventEnd returns the length of the first complete SSE event in b
// (through its terminating blank line), or -1.
func eventEnd(b []byte) int {
	for off := 0; ; {
		k := bytes.IndexByte(b[off:], '\n')
		if k < 0 {
			return -1
		}
		i := off + k + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
		off = i
	}
}
