package fakellm

import (
	"encoding/json"
	"strings"
)

// Reply is the assistant text the fake answers to a user message.
func Reply(lastUser string) string {
	if strings.TrimSpace(lastUser) == "" {
		return "Hello from fakellm."
	}
	return "You said: " + lastUser
}

// ToolReply is the assistant text the fake answers to a tool result:
// "Tool result: " and the output — a JSON object's fields spelled out as
// "key: value" pairs (nested ones as "outer.inner: value"), so the answer
// reads as a sentence; any other output verbatim.
func ToolReply(toolOutput string) string { return "Tool result: " + spellOut(toolOutput) }

// spellOut turns a JSON object into "a: 1, b.c: x"; anything else is returned as is.
func spellOut(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{") {
		return s
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var parts []string
	if !spellObject(dec, "", &parts) || dec.More() || len(parts) == 0 {
		return s
	}
	return strings.Join(parts, ", ")
}

// spellObject reads one object from dec (its '{' not yet read) into parts,
// keeping the order of its keys.
func spellObject(dec *json.Decoder, prefix string, parts *[]string) bool {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return false
		}
		name := prefix + key
		v := strings.TrimSpace(string(raw))
		switch {
		case strings.HasPrefix(v, "{"):
			sub := json.NewDecoder(strings.NewReader(v))
			sub.UseNumber()
			if !spellObject(sub, name+".", parts) {
				return false
			}
		case strings.HasPrefix(v, `"`):
			var str string
			_ = json.Unmarshal(raw, &str)
			*parts = append(*parts, name+": "+str)
		default:
			*parts = append(*parts, name+": "+v)
		}
	}
	_, err := dec.Token() // '}'
	return err == nil
}

// ToolArguments are the arguments of a call of a tool whose parameters
// declare no properties: the whole user message as "input".
func ToolArguments(lastUser string) string {
	b, _ := json.Marshal(map[string]string{"input": lastUser})
	return string(b)
}

// Pieces splits text into the deltas of a stream: one word each, the space
// before a word kept with it, so concatenating them gives text back.
func Pieces(text string) []string {
	var out []string
	start := 0
	for i := 1; i < len(text); i++ {
		if text[i] == ' ' && text[i-1] != ' ' {
			out = append(out, text[start:i])
			start = i
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// argPieces splits tool-call arguments into small fragments, as a real model
// streams them.
func argPieces(args string) []string {
	const n = 8
	var out []string
	for len(args) > n {
		out = append(out, args[:n])
		args = args[n:]
	}
	return append(out, args)
}

// Usage is the fake's token accounting: prompt tokens are the words of the
// request's messages, completion tokens the pieces of the answer; half the
// prompt is "cached" and a quarter of the completion is "reasoning", so
// every counter a meter reads is non-zero.
type Usage struct {
	Prompt, Completion, Cached, Reasoning int
}

// Total is Prompt + Completion.
func (u Usage) Total() int { return u.Prompt + u.Completion }

func usageFor(promptWords, completionPieces int) Usage {
	u := Usage{Prompt: max(1, promptWords), Completion: max(1, completionPieces)}
	u.Cached = u.Prompt / 2
	u.Reasoning = u.Completion / 4
	return u
}

// contentText is the text of a message content: a string, or an array of
// parts of which the text ones count.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Text != "" {
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

func words(s string) int { return len(strings.Fields(s)) }
