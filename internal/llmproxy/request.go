package llmproxy

import (
	"bytes"
	"encoding/json"
	"net/http"
)

var identity = []string{"identity"}

// reqInfo is what the proxy needs from a request body, found without
// decoding it.
type reqInfo struct {
	open          int    // index of the top-level '{'
	model         string // as sent by the client
	modelSpan     span
	stream        bool
	streamOptions span // the stream_options value, if any
	includeUsage  span // stream_options.include_usage value, if any
	clientUsage   bool // the client asked for the usage chunk itself
}

func badRequest(code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: msg}
}

// inspectRequest finds model, stream and stream_options.include_usage.
func inspectRequest(body []byte) (reqInfo, error) {
	ri := reqInfo{modelSpan: absent, streamOptions: absent, includeUsage: absent}
	var modelErr error
	open, err := scanObject(body, func(k []byte, v span) bool {
		switch string(k) {
		case "model":
			ri.modelSpan = v
			raw := body[v.start:v.end]
			if raw[0] != '"' {
				modelErr = badRequest(CodeInvalidRequest, "model must be a string")
				return true
			}
			if bytes.IndexByte(raw, '\\') < 0 {
				ri.model = string(raw[1 : len(raw)-1])
			} else if err := json.Unmarshal(raw, &ri.model); err != nil {
				modelErr = badRequest(CodeInvalidJSON, "model: "+err.Error())
			}
		case "stream":
			ri.stream = string(body[v.start:v.end]) == "true"
		case "stream_options":
			ri.streamOptions = v
		}
		return true
	})
	if err != nil {
		return ri, badRequest(CodeInvalidJSON, "request body must be a JSON object")
	}
	if modelErr != nil {
		return ri, modelErr
	}
	if ri.model == "" {
		return ri, badRequest(CodeInvalidRequest, "model is required")
	}
	ri.open = open
	if so := ri.streamOptions; so.ok() && body[so.start] == '{' {
		sub := body[so.start:so.end]
		if v := findMember(sub, "include_usage"); v.ok() {
			ri.includeUsage = span{so.start + v.start, so.start + v.end}
			ri.clientUsage = string(body[ri.includeUsage.start:ri.includeUsage.end]) == "true"
		}
	}
	return ri, nil
}

// edit is one splice of the request body.
type edit struct {
	at, end int // replace body[at:end]
	with    string
}

// rewriteRequest applies the route's model rewrite and, for streaming chat
// completions, turns stream_options.include_usage on so the stream can be
// metered. It returns body itself when nothing changes.
func rewriteRequest(body []byte, ri *reqInfo, upstreamModel string, injectUsage bool) []byte {
	var edits [2]edit
	n := 0
	if injectUsage {
		switch {
		case ri.includeUsage.ok():
			edits[n] = edit{ri.includeUsage.start, ri.includeUsage.end, "true"}
		case ri.streamOptions.ok() && body[ri.streamOptions.start] == '{':
			// Insert as the first member of the existing object.
			so := ri.streamOptions
			in := `"include_usage":true`
			if j := skipSpace(body, so.start+1); body[j] != '}' {
				in += ","
			}
			edits[n] = edit{so.start + 1, so.start + 1, in}
		case ri.streamOptions.ok(): // "stream_options": null
			edits[n] = edit{ri.streamOptions.start, ri.streamOptions.end, `{"include_usage":true}`}
		default:
			// A streaming request has at least "model" and "stream", so the
			// object is not empty and a trailing comma is right.
			edits[n] = edit{ri.open + 1, ri.open + 1, `"stream_options":{"include_usage":true},`}
		}
		n++
	}
	if upstreamModel != ri.model {
		b, _ := json.Marshal(upstreamModel)
		edits[n] = edit{ri.modelSpan.start, ri.modelSpan.end, string(b)}
		n++
	}
	if n == 0 {
		return body
	}
	if n == 2 && edits[1].at < edits[0].at {
		edits[0], edits[1] = edits[1], edits[0]
	}
	grow := 0
	for _, e := range edits[:n] {
		grow += len(e.with) - (e.end - e.at)
	}
	out := make([]byte, 0, len(body)+grow)
	last := 0
	for _, e := range edits[:n] {
		out = append(out, body[last:e.at]...)
		out = append(out, e.with...)
		last = e.end
	}
	return append(out, body[last:]...)
}

// hop-by-hop and proxy-owned request headers, never forwarded upstream.
var dropRequestHeader = map[string]bool{
	"Authorization":       true, // the agent key; the upstream key replaces it
	"Api-Key":             true, // other spellings of a client key must not leak upstream either
	"X-Api-Key":           true,
	"X-Admin-Key":         true,
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Authorization": true,
	"Proxy-Connection":    true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Content-Length":      true,
	"Accept-Encoding":     true, // identity is requested so usage can be read
	"Cookie":              true,
	"Host":                true,
	"X-Run-Id":            true,
	"X-Session-Id":        true,
	"Openai-Organization": true, // they belong to the upstream account, not the agent
	"Openai-Project":      true,
	"X-Forwarded-For":     true,
	"Forwarded":           true,
}

// upstreamHeader builds the headers of an upstream request from the
// client's, with the upstream's Authorization value (none when nil).
func upstreamHeader(in http.Header, authorization []string) http.Header {
	h := make(http.Header, len(in)+2)
	for k, vv := range in {
		if dropRequestHeader[k] {
			continue
		}
		h[k] = vv
	}
	if authorization != nil {
		h["Authorization"] = authorization
	}
	// Ask for identity so the body we meter is never compressed; Go's
	// transport would otherwise add gzip itself (DisableCompression is set
	// too).
	h["Accept-Encoding"] = identity
	return h
}
