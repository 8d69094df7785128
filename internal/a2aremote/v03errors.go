package a2aremote

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
)

// v03Errors is the RoundTripper of the v0.3 compat transport only. A2A
// v0.3 lets a JSON-RPC error's data be any value, and a2a-go v0.3's
// server (v0.3.15) sends an object: {"error": "<the executor's error>"}
// or the a2a.Error's details. a2a-go v2's v0.3 client decodes data into
// v1.0's array of typed details, so such an answer fails to decode as a
// whole ("cannot unmarshal object into … []*errordetails.Typed") and a
// remote's refusal (task not found, its executor failing, an unsupported
// operation) read as agent_protocol_error, its code and message lost. v03Errors rewrites
// an error whose data is not that array into it, the data as one
// google.protobuf.Struct detail, which the library hands back as the
// a2a.Error's Details. Answers that are not errors, and errors already in
// v1.0's shape (a2a-go v2's own v0.3 binding), pass unchanged. The
// v1.0 transport does not use it.
type v03Errors struct{ base http.RoundTripper }

func (t v03Errors) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	// A blocking answer is one JSON document (a2a-go v0.3 sends it without
	// a Content-Type, sniffed as text/plain); a stream is one per data line.
	resp.Body = &v03Body{body: resp.Body, r: bufio.NewReader(resp.Body), sse: mt == "text/event-stream"}
	return resp, nil
}

// v03Body hands out the answer with its errors mended: a stream line by
// line (each SSE event is whole once its line is, so nothing is held
// back), a blocking answer whole.
type v03Body struct {
	body    io.ReadCloser
	r       *bufio.Reader
	sse     bool
	pending []byte
	err     error
}

func (b *v03Body) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.pending, b.err = b.next()
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *v03Body) next() ([]byte, error) {
	if !b.sse {
		all, err := io.ReadAll(b.r)
		if err == nil {
			err = io.EOF
		}
		return mendV03Error(all), err
	}
	line, err := b.r.ReadBytes('\n')
	if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		doc := bytes.TrimRight(rest, "\r\n")
		if mended := mendV03Error(doc); !bytes.Equal(mended, doc) {
			line = append(append([]byte("data: "), mended...), rest[len(doc):]...)
		}
	}
	return line, err
}

func (b *v03Body) Close() error { return b.body.Close() }

var errorMember = []byte(`"error"`)

// mendV03Error returns doc, a JSON-RPC answer, with its error's data as
// v1.0's array of typed details; doc itself when it is no error, or its
// data is that array already (or absent).
func mendV03Error(doc []byte) []byte {
	if !bytes.Contains(doc, errorMember) { // results: not parsed twice
		return doc
	}
	var resp map[string]json.RawMessage
	if json.Unmarshal(doc, &resp) != nil {
		return doc
	}
	var e map[string]json.RawMessage
	if json.Unmarshal(resp["error"], &e) != nil || e == nil {
		return doc
	}
	data, ok := e["data"]
	var typed []map[string]any
	if !ok || json.Unmarshal(data, &typed) == nil {
		return doc
	}
	var detail map[string]any
	if json.Unmarshal(data, &detail) != nil { // a string, a number, an array of them
		detail = map[string]any{"data": data}
	}
	mended, err := json.Marshal([]map[string]any{detail})
	if err != nil {
		return doc
	}
	e["data"] = mended
	if resp["error"], err = json.Marshal(e); err != nil {
		return doc
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return doc
	}
	return out
}
