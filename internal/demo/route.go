package demo

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Names of the demo's tools (see RegisterTools).
const (
	ToolWeather  = "demo.weather"
	ToolNow      = "client.now"
	ToolTransfer = "demo.transfer"
)

// defaultCity is the city of a weather question that names none.
const defaultCity = "Paris"

// route is what the demo agent does with a message: call Tool with Args, or
// ask the model when Tool is "".
type route struct {
	Tool string
	Args map[string]any
}

var (
	// "send 250 to Bob", "transfer $1,000.50 to Alice Smith please".
	transferRe = regexp.MustCompile(`(?i)\b(?:send|transfer)\s+(?:[$€£]\s*)?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(?:[$€£]|eur(?:os?)?\b|usd\b|dollars?\b)?\s+to\s+(.+)`)
	weatherRe  = regexp.MustCompile(`(?i)\b(?:weather|forecast)\b`)
	// The place follows "in", "for" or "at": "weather in New York today?".
	placeRe = regexp.MustCompile(`(?i)\b(?:in|for|at)\s+([\p{L}][\p{L}'’-]*(?:\s+[\p{L}][\p{L}'’-]*){0,3})`)
	timeRe  = regexp.MustCompile(`(?i)\b(?:time|clock)\b`)
)

// fillers end a parsed name or place: "weather in Paris today", "send 5 to
// Bob please".
var fillers = map[string]bool{
	"today": true, "tomorrow": true, "tonight": true, "now": true, "please": true, "right": true,
	"this": true, "like": true, "currently": true, "thanks": true, "thank": true, "asap": true,
	"and": true, "then": true, "the": true, "is": true,
	"at": true, "in": true, "on": true, "for": true, "with": true, "from": true, "via": true,
}

// routeMessage picks a tool from the user's words, most specific first: a
// transfer names an amount and a payee, a weather question may also say
// "time", and "time" alone asks the browser's clock.
func routeMessage(text string) route {
	if m := transferRe.FindStringSubmatch(text); m != nil {
		amount, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
		if to := cleanName(m[2]); err == nil && to != "" {
			return route{Tool: ToolTransfer, Args: map[string]any{"amount": amount, "to": to}}
		}
	}
	if weatherRe.MatchString(text) {
		city := defaultCity
		if m := placeRe.FindStringSubmatch(text); m != nil {
			if c := titleCase(cleanName(m[1])); c != "" {
				city = c
			}
		}
		return route{Tool: ToolWeather, Args: map[string]any{"city": city}}
	}
	if timeRe.MatchString(text) {
		return route{Tool: ToolNow, Args: map[string]any{}}
	}
	return route{}
}

// cleanName keeps the words of s up to the first punctuation mark or filler
// word, at most four of them.
func cleanName(s string) string {
	if i := strings.IndexAny(s, ".,!?;:()\n\""); i >= 0 {
		s = s[:i]
	}
	var words []string
	for _, w := range strings.Fields(s) {
		if fillers[strings.ToLower(w)] || len(words) == 4 {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// titleCase capitalises each word: "new york" → "New York".
func titleCase(s string) string {
	words := strings.Fields(s)
	for i, w := range words {
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		words[i] = string(r)
	}
	return strings.Join(words, " ")
}
