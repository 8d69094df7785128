package fakellm

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// toolSpec is one function a request offers, whichever API it came in.
type toolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// toolChoice is a request's tool_choice: "" (absent) or "auto", "none",
// "required", or the name of the function it forces.
type toolChoice struct {
	mode     string
	function string
}

// parseToolChoice reads tool_choice in either API's spelling: a string, or
// {"type":"function","function":{"name"}} (Chat Completions) or
// {"type":"function","name"} (Responses).
func parseToolChoice(raw json.RawMessage) toolChoice {
	if len(raw) == 0 {
		return toolChoice{}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return toolChoice{mode: s}
	}
	var obj struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		if obj.Function.Name != "" {
			return toolChoice{mode: "function", function: obj.Function.Name}
		}
		if obj.Name != "" {
			return toolChoice{mode: "function", function: obj.Name}
		}
	}
	return toolChoice{}
}

// chooseTool picks the function to call for lastUser, or returns nil for a
// text answer. The rule is in the package doc.
func chooseTool(tools []toolSpec, choice toolChoice, lastUser string) *toolSpec {
	if len(tools) == 0 || choice.mode == "none" {
		return nil
	}
	if choice.mode == "function" {
		for i := range tools {
			if tools[i].Name == choice.function {
				return &tools[i]
			}
		}
	}
	msg := messageWords(lastUser)
	best, bestScore, bestPos := -1, 0, 0
	for i := range tools {
		score, pos := scoreTool(&tools[i], msg)
		if score > bestScore || (score == bestScore && score > 0 && pos < bestPos) {
			best, bestScore, bestPos = i, score, pos
		}
	}
	if best >= 0 {
		return &tools[best]
	}
	if choice.mode == "required" || choice.mode == "function" {
		return &tools[0]
	}
	return nil
}

// scoreTool is 2 for each distinct message word that matches a word of the
// tool's name and 1 for each that matches a word of its description; pos is
// the index in msg of the first word that matched (len(msg) if none).
func scoreTool(t *toolSpec, msg []string) (score, pos int) {
	nameWords := keywords(functionBaseName(t.Name))
	descWords := keywords(t.Description)
	pos = len(msg)
	seen := map[string]bool{}
	for i, w := range msg {
		if seen[w] {
			continue
		}
		seen[w] = true
		s := 0
		if matchesAny(w, nameWords) {
			s += 2
		}
		if matchesAny(w, descWords) {
			s++
		}
		if s > 0 && pos == len(msg) {
			pos = i
		}
		score += s
	}
	return score, pos
}

// functionBaseName is the part of a function name that says what it does:
// the last dotted segment, with "__" read as "." and what follows "--" as
// an MCP server's tool (the platform's spelling of tool names as
// functions), so "demo__weather" → "weather" and "demo_mcp--lookup_order"
// → "lookup_order".
func functionBaseName(name string) string {
	if i := strings.LastIndex(name, "--"); i >= 0 {
		name = name[i+2:]
	}
	name = strings.ReplaceAll(name, "__", ".")
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// stopWords carry no intent; they never match.
var stopWords = map[string]bool{
	"the": true, "and": true, "for": true, "with": true, "from": true, "what": true, "whats": true,
	"who": true, "how": true, "when": true, "where": true, "which": true, "why": true, "this": true,
	"that": true, "these": true, "those": true, "you": true, "your": true, "are": true, "was": true,
	"were": true, "can": true, "could": true, "would": true, "should": true, "will": true, "please": true,
	"tell": true, "give": true, "get": true, "some": true, "any": true, "all": true, "about": true,
	"into": true, "out": true, "our": true, "their": true, "has": true, "have": true, "had": true,
	"not": true, "but": true, "its": true, "it's": true, "does": true, "did": true, "call": true,
	"tool": true, "function": true, "use": true, "need": true, "needs": true, "than": true, "then": true,
	"them": true, "they": true, "his": true, "her": true, "she": true, "him": true, "like": true,
}

// splitWords cuts s into lower-case runs of letters and digits, also
// splitting camelCase ("getWeather" → get, weather).
func splitWords(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	var prev rune
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && unicode.IsLower(prev) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
		}
		prev = r
	}
	flush()
	return out
}

// keywords are the words of s that can match: three letters or more, not
// a stop word, not a number.
func keywords(s string) []string {
	var out []string
	for _, w := range splitWords(s) {
		if len([]rune(w)) < 3 || stopWords[w] || isNumber(w) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// messageWords are the keywords of a user message in order.
func messageWords(s string) []string { return keywords(s) }

func isNumber(w string) bool {
	for _, r := range w {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// matchesAny reports whether w matches one of kws: the same word, or one is
// a prefix of the other and the shorter has at least four letters ("look"
// matches "lookup", "send" matches "sending").
func matchesAny(w string, kws []string) bool {
	for _, k := range kws {
		if w == k {
			return true
		}
		short, long := w, k
		if len(short) > len(long) {
			short, long = long, short
		}
		if len([]rune(short)) >= 4 && strings.HasPrefix(long, short) {
			return true
		}
	}
	return false
}

// freeTextParams take the whole message as their value.
var freeTextParams = map[string]bool{
	"input": true, "query": true, "q": true, "message": true, "text": true, "prompt": true,
	"question": true, "content": true, "request": true, "instruction": true, "instructions": true,
	"task": true,
}

// placeWords introduce a phrase a string parameter may take: "weather in
// Paris", "send 5 to Bob".
var placeWords = []string{"in", "at", "for", "near", "from", "to", "of"}

// phraseEnders end a phrase taken from the message: "weather in Paris
// today", "send 5 to Bob please".
var phraseEnders = map[string]bool{
	"today": true, "tomorrow": true, "tonight": true, "now": true, "please": true, "right": true,
	"this": true, "like": true, "currently": true, "thanks": true, "thank": true, "asap": true,
	"and": true, "then": true, "the": true, "is": true, "at": true, "in": true, "on": true,
	"for": true, "with": true, "from": true, "via": true, "to": true, "of": true, "near": true,
}

var numberRe = regexp.MustCompile(`\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?`)

// toolArguments fills the parameters of t from lastUser (the rule is in the
// package doc) and returns them as a JSON object.
func toolArguments(t *toolSpec, lastUser string) string {
	var schema struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	_ = json.Unmarshal(t.Parameters, &schema)
	if len(schema.Properties) == 0 || string(schema.Properties) == "null" {
		return ToolArguments(lastUser)
	}
	names, props := orderedProperties(schema.Properties)
	required := map[string]bool{}
	for _, r := range schema.Required {
		required[r] = true
	}
	numbers := numberRe.FindAllString(lastUser, -1)
	usedPlaces := map[int]bool{}
	args := newOrderedObject()
	for _, name := range names {
		var p struct {
			Type    json.RawMessage `json:"type"`
			Enum    []any           `json:"enum"`
			Default any             `json:"default"`
		}
		_ = json.Unmarshal(props[name], &p)
		typ := schemaType(p.Type)
		var v any
		switch {
		case len(p.Enum) > 0:
			v, _ = enumValue(p.Enum, lastUser)
		case typ == "number" || typ == "integer":
			if len(numbers) == 0 {
				break
			}
			f, err := strconv.ParseFloat(strings.ReplaceAll(numbers[0], ",", ""), 64)
			if err == nil && (typ == "number" || f == float64(int64(f))) {
				numbers = numbers[1:]
				v = f
			}
		case typ == "string" || typ == "":
			if freeTextParams[strings.ToLower(name)] {
				v = clauseFor(t, lastUser)
			} else if ph := phraseAfter(lastUser, []string{name}, usedPlaces); ph != "" {
				v = ph
			} else if ph := phraseAfter(lastUser, placeWords, usedPlaces); ph != "" {
				v = ph
			}
		}
		if v == nil {
			v = p.Default
		}
		if v == nil && required[name] {
			v = placeholder(typ, p.Enum, lastUser)
		}
		if v != nil {
			args.set(name, v)
		}
	}
	return args.String()
}

// placeholder is the value of a required parameter the message does not
// give: the first enum value, the whole message for a string, the zero
// value of other types but numbers (left out, so the call is refused as a
// real model's would be).
func placeholder(typ string, enum []any, msg string) any {
	switch {
	case len(enum) > 0:
		return enum[0]
	case typ == "string" || typ == "":
		return msg
	case typ == "boolean":
		return false
	case typ == "array":
		return []any{}
	case typ == "object":
		return map[string]any{}
	}
	return nil
}

// schemaType is a property's type; of a list of types the first that is not "null".
func schemaType(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		for _, t := range list {
			if t != "null" {
				return t
			}
		}
	}
	return ""
}

// enumValue is the first of enum that the message names (as a whole word,
// any case).
func enumValue(enum []any, msg string) (any, bool) {
	words := map[string]bool{}
	for _, w := range splitWords(msg) {
		words[w] = true
	}
	lower := strings.ToLower(msg)
	for _, v := range enum {
		s, ok := v.(string)
		if !ok {
			continue
		}
		ls := strings.ToLower(s)
		if words[ls] || (strings.ContainsAny(ls, " -_") && strings.Contains(lower, ls)) {
			return v, true
		}
	}
	return nil, false
}

// phraseAfter finds the first of the words intro (case-insensitive, not
// yet in used) in msg that is followed by a phrase of letters, and returns
// that phrase: up to four words, ending at punctuation, a digit or a
// phraseEnders word. used, when not nil, records which word positions of
// msg were taken, so two parameters do not take the same phrase.
func phraseAfter(msg string, intro []string, used map[int]bool) string {
	fields := strings.Fields(msg)
	for i := 0; i+1 < len(fields); i++ {
		w := strings.ToLower(strings.TrimRight(fields[i], ":=,"))
		if used != nil && used[i] {
			continue
		}
		hit := false
		for _, in := range intro {
			if w == strings.ToLower(in) {
				hit = true
				break
			}
		}
		if !hit {
			continue
		}
		phrase := takePhrase(fields[i+1:])
		if phrase == "" {
			continue
		}
		if used != nil {
			used[i] = true
		}
		return phrase
	}
	return ""
}

// takePhrase keeps the leading words of fields that form a name or place.
func takePhrase(fields []string) string {
	var words []string
	for _, f := range fields {
		cut := strings.IndexAny(f, ".,!?;:()\"")
		word := f
		if cut >= 0 {
			word = f[:cut]
		}
		if word == "" || phraseEnders[strings.ToLower(word)] || len(words) == 4 {
			break
		}
		r := []rune(word)
		if !unicode.IsLetter(r[0]) {
			break
		}
		words = append(words, word)
		if cut >= 0 {
			break
		}
	}
	return strings.Join(words, " ")
}

// orderedProperties reads a schema's "properties" object keeping the order
// its keys were written in, so arguments come out in the schema's order.
func orderedProperties(raw json.RawMessage) ([]string, map[string]json.RawMessage) {
	props := map[string]json.RawMessage{}
	if json.Unmarshal(raw, &props) != nil {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var names []string
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		name, _ := tok.(string)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			break
		}
		names = append(names, name)
	}
	return names, props
}

// orderedObject builds a JSON object whose keys keep the order they were set in.
type orderedObject struct {
	keys []string
	vals map[string]any
}

func newOrderedObject() *orderedObject { return &orderedObject{vals: map[string]any{}} }

func (o *orderedObject) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *orderedObject) String() string {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(o.vals[k])
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.String()
}
