package fakellm

import "strings"

// toolResult is one tool's answer in the conversation: the function called
// and what it returned.
type toolResult struct {
	name   string
	output string
}

// round is what the fake reads of a conversation, whichever API it came
// in: the last user message, the functions called since it and their
// results, in order, and whether the conversation ends with a result.
type round struct {
	lastUser     string
	called       map[string]bool
	results      []toolResult
	endsWithTool bool
}

// userTurn starts a new round: what came before the user's message is no
// longer this round's.
func (r *round) userTurn(text string) {
	r.lastUser = text
	r.called = map[string]bool{}
	r.results = nil
}

// afterTools decides what follows tool results: while the message has a
// clause no call has served yet, the best-matching function not called yet
// in this round; else the answer. The rule is in the package doc.
func (r *round) afterTools(tools []toolSpec, choice toolChoice) (*toolSpec, string) {
	if choice.mode != "none" && len(splitClauses(r.lastUser)) > len(r.called) {
		var fresh []toolSpec
		for _, t := range tools {
			if !r.called[t.Name] {
				fresh = append(fresh, t)
			}
		}
		// Keyword matching only: a forced or required choice after results
		// would call tools forever.
		if t := chooseTool(fresh, toolChoice{}, r.lastUser); t != nil {
			return t, ""
		}
	}
	return nil, summarize(r.results)
}

// summarize is the answer after tool results: ToolReply of the only result,
// or each result on its own line after the function that gave it.
func summarize(results []toolResult) string {
	if len(results) <= 1 {
		out := ""
		if len(results) == 1 {
			out = results[0].output
		}
		return ToolReply(out)
	}
	var b strings.Builder
	b.WriteString("Tool results:")
	for _, res := range results {
		b.WriteString("\n- ")
		if res.name != "" {
			b.WriteString(res.name + ": ")
		}
		b.WriteString(spellOut(res.output))
	}
	return b.String()
}

// clauseFor is the part of msg a free-text parameter of t takes: the
// clause (msg cut at ",", ";" and the word "then") whose words match t
// best, without a leading "and", "also" or "then"; the whole message when
// it has one clause or no clause matches.
func clauseFor(t *toolSpec, msg string) string {
	clauses := splitClauses(msg)
	if len(clauses) < 2 {
		return msg
	}
	best, bestScore := "", 0
	for _, c := range clauses {
		if s, _ := scoreTool(t, messageWords(c)); s > bestScore {
			best, bestScore = c, s
		}
	}
	if bestScore == 0 {
		return msg
	}
	return best
}

// connectives open a clause without meaning anything in it.
var connectives = map[string]bool{"and": true, "also": true, "then": true}

func splitClauses(msg string) []string {
	var out []string
	var cur []string
	flush := func() {
		for len(cur) > 0 && connectives[strings.ToLower(strings.Trim(cur[0], ".,;:!?"))] {
			cur = cur[1:]
		}
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
		}
		cur = nil
	}
	for _, f := range strings.Fields(msg) {
		if strings.EqualFold(f, "then") {
			flush()
			continue
		}
		for {
			i := strings.IndexAny(f, ",;")
			if i < 0 {
				break
			}
			if i > 0 {
				cur = append(cur, f[:i])
			}
			flush()
			f = f[i+1:]
		}
		if f != "" {
			cur = append(cur, f)
		}
	}
	flush()
	return out
}
