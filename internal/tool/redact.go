package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Redacted replaces a redacted argument's value wherever the platform
// records or shows a call.
const Redacted = "[redacted]"

// Bounds of Definition.Redact.
const (
	MaxRedactPaths   = 32
	MaxRedactPathLen = 256
)

// checkRedact validates redaction paths: dot-separated object keys, "*"
// standing for every element of an array or every value of an object.
//
// Only server and MCP tools may redact: the platform keeps a redacted
// call's real arguments in memory just long enough to send them to the
// tool itself. A client tool's arguments reach the user's client through
// the event log, which would then carry "[redacted]" instead of what the
// client needs, and an agent call's message is its child's input, stored as
// the child's transcript — neither could be redacted and still work.
func checkRedact(kind string, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	if kind != KindServer && kind != KindMCP {
		return invalid("redact", nil, "applies to server and MCP tools only: a %s tool's arguments are delivered through the event log, which redaction would blank", kind)
	}
	if len(paths) > MaxRedactPaths {
		return invalid("redact", nil, "lists %d paths; at most %d are allowed", len(paths), MaxRedactPaths)
	}
	for i, p := range paths {
		field := fmt.Sprintf("redact[%d]", i)
		if p == "" || len(p) > MaxRedactPathLen {
			return invalid(field, nil, "must be a path of 1-%d characters such as \"card.number\"", MaxRedactPathLen)
		}
		for _, seg := range strings.Split(p, ".") {
			if seg == "" {
				return invalid(field, nil, "%q has an empty segment; write keys separated by single dots, e.g. \"card.number\"", p)
			}
		}
	}
	return nil
}

// Redacts reports whether the tool redacts arguments.
func (t *Tool) Redacts() bool { return len(t.Def.Redact) > 0 }

// RedactArgs returns args with the value at each of the tool's redaction
// paths replaced by "[redacted]" (paths that are absent are skipped), keys
// in the order they were sent, and whether anything was replaced. args
// must be a JSON object (as validated); anything else comes back as it is.
func (t *Tool) RedactArgs(args json.RawMessage) (json.RawMessage, bool) {
	if len(t.Def.Redact) == 0 {
		return args, false
	}
	paths := make([][]string, len(t.Def.Redact))
	for i, p := range t.Def.Redact {
		paths[i] = strings.Split(p, ".")
	}
	out, changed, err := redactValue(args, paths)
	if err != nil {
		return args, false
	}
	return out, changed
}

var redactedJSON = json.RawMessage(`"` + Redacted + `"`)

// redactValue rewrites v: each path is the rest of a redaction path below
// v; an empty one means v itself is redacted.
func redactValue(v json.RawMessage, paths [][]string) (json.RawMessage, bool, error) {
	for _, p := range paths {
		if len(p) == 0 {
			return redactedJSON, true, nil
		}
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return v, false, nil
	}
	switch v[0] {
	case '{':
		return redactObject(v, paths)
	case '[':
		return redactArray(v, paths)
	}
	return v, false, nil
}

// below returns the paths that continue under key (or under any element,
// for key "" with arrays: only "*" matches).
func below(paths [][]string, key string, isArray bool) [][]string {
	var out [][]string
	for _, p := range paths {
		if p[0] == "*" || (!isArray && p[0] == key) {
			out = append(out, p[1:])
		}
	}
	return out
}

func redactObject(v json.RawMessage, paths [][]string) (json.RawMessage, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	changed := false
	for i := 0; dec.More(); i++ {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, false, err
		}
		if sub := below(paths, key, false); len(sub) > 0 {
			nv, c, err := redactValue(val, sub)
			if err != nil {
				return nil, false, err
			}
			val, changed = nv, changed || c
		}
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), changed, nil
}

func redactArray(v json.RawMessage, paths [][]string) (json.RawMessage, bool, error) {
	sub := below(paths, "", true)
	if len(sub) == 0 {
		return v, false, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, false, err
	}
	changed := false
	for i, e := range elems {
		nv, c, err := redactValue(e, sub)
		if err != nil {
			return nil, false, err
		}
		elems[i], changed = nv, changed || c
	}
	out, err := json.Marshal(elems)
	return out, changed, err
}
