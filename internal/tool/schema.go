package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaURL names a tool's parameters schema inside its own compiler. The
// scheme resolves nowhere, so a relative $ref in the schema can only reach
// the refusing loader below.
const schemaURL = "mem:///parameters.json"

var printer = message.NewPrinter(language.English)

// ArgsError says why a call's args do not satisfy the tool's schema. The HTTP
// layer answers it with 400 invalid_args.
type ArgsError struct {
	// Message describes the first problem found (and how many more there are).
	Message string
	// Path is the JSON pointer of the offending value in args, e.g. "/to";
	// empty for the args object itself.
	Path string
	// Err is the underlying JSON or schema validation error.
	Err error
}

// Error returns the path and the message.
func (e *ArgsError) Error() string {
	if e.Path == "" {
		return "invalid args: " + e.Message
	}
	return "invalid args at " + e.Path + ": " + e.Message
}

// Unwrap returns the underlying cause.
func (e *ArgsError) Unwrap() error { return e.Err }

// refuseLoader stops a schema from loading anything by URL. The library's
// default loader reads local files, which would let whoever registers a tool
// make the server read (and report fragments of) any file it can open. The
// standard meta-schemas are embedded in the library and load without it.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %q is not allowed: a tool's schema must be self-contained (use #/$defs/…)", url)
}

// compileSchema checks and compiles a parameters schema, returning it in
// compact form.
func compileSchema(raw json.RawMessage) (json.RawMessage, *jsonschema.Schema, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = []byte(defaultParameters)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, trimmed); err != nil {
		return nil, nil, invalid("parameters", err, "is not valid JSON: %v", err)
	}
	if compact.Len() > MaxParametersLen {
		return nil, nil, invalid("parameters", nil, "is %d bytes; at most %d are allowed", compact.Len(), MaxParametersLen)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(compact.Bytes()))
	if err != nil {
		return nil, nil, invalid("parameters", err, "is not valid JSON: %v", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, invalid("parameters", nil, "must be a JSON Schema object")
	}
	// Args are always a JSON object, and OpenAI-style function calling
	// requires an object schema, so say so instead of accepting a schema that
	// no call could satisfy.
	if obj["type"] != "object" {
		return nil, nil, invalid("parameters", nil, `must have "type": "object" (a tool's args are a JSON object)`)
	}

	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	// Pin the draft for schemas without "$schema" so a library upgrade cannot
	// change what registered tools accept.
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, nil, invalid("parameters", err, "is not a valid JSON Schema: %v", err)
	}
	schema, err := c.Compile(schemaURL)
	if err != nil {
		return nil, nil, invalid("parameters", err, "is not a valid JSON Schema: %s", schemaErrorText(err))
	}
	return compact.Bytes(), schema, nil
}

// schemaErrorText shortens the library's compile errors, which name our
// internal schema URL, to something an administrator can act on.
func schemaErrorText(err error) string {
	return strings.ReplaceAll(err.Error(), schemaURL, "parameters")
}

// ValidateArgs checks a call's args against the tool's schema. args must be a
// JSON object; absent args are not defaulted to {} here (the caller decides).
// Errors are *ArgsError.
func (t *Tool) ValidateArgs(args json.RawMessage) error {
	// UnmarshalJSON keeps numbers as json.Number so that integer and range
	// checks are exact even beyond float64 precision.
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgsError{Message: fmt.Sprintf("args are not valid JSON: %v", err), Err: err}
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return &ArgsError{Message: "args must be a JSON object, got " + jsonTypeName(doc)}
	}
	err = t.schema.Validate(doc)
	if err == nil {
		return nil
	}
	return t.scrubArgsError(obj, schemaArgsError(err))
}

// scrubArgsError keeps the tool's redacted values out of an args error: the
// schema library quotes the value it refused (a pattern's or a format's
// "'4111…' does not match …"), and the message is the agent's 400
// invalid_args answer (DESIGN §15: redacted values are in no answer).
func (t *Tool) scrubArgsError(args map[string]any, ae *ArgsError) *ArgsError {
	if !t.Redacts() {
		return ae
	}
	ae.Message = t.scrubRedacted(args, ae.Message)
	if ae.Err != nil {
		ae.Err = scrubbedError{t.scrubRedacted(args, ae.Err.Error()), ae.Err}
	}
	return ae
}

// schemaArgsError describes a failed validation by its first problem.
func schemaArgsError(err error) *ArgsError {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ArgsError{Message: err.Error(), Err: err}
	}
	leaves := schemaProblems(ve, nil)
	// The library visits properties in map order; sort so the same args
	// always get the same message.
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		return strings.Compare(jsonPointer(a.InstanceLocation), jsonPointer(b.InstanceLocation))
	})
	if len(leaves) == 0 {
		// Cannot happen for a failed validation, but keep a message.
		return &ArgsError{Message: ve.Error(), Err: err}
	}
	first := leaves[0]
	msg := first.ErrorKind.LocalizedString(printer)
	if n := len(leaves) - 1; n == 1 {
		msg += " (and 1 more problem)"
	} else if n > 1 {
		msg += fmt.Sprintf(" (and %d more problems)", n)
	}
	return &ArgsError{Message: msg, Path: jsonPointer(first.InstanceLocation), Err: err}
}

// schemaProblems flattens a validation error tree into the errors that name
// an actual problem, skipping the wrappers (the schema as a whole, $ref,
// allOf groups) that only say "something below failed".
func schemaProblems(e *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	switch e.ErrorKind.(type) {
	case *kind.Schema, *kind.Reference, *kind.Group, *kind.AllOf:
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				out = schemaProblems(c, out)
			}
			return out
		}
	}
	return append(out, e)
}

// jsonPointer renders an instance location as an RFC 6901 pointer.
func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, tok := range tokens {
		b.WriteByte('/')
		tok = strings.ReplaceAll(tok, "~", "~0")
		b.WriteString(strings.ReplaceAll(tok, "/", "~1"))
	}
	return b.String()
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
