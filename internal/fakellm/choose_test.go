package fakellm

import (
	"encoding/json"
	"testing"
)

// Tools shaped like the demo's, named as GET /v1/tools spells them; the
// rule must find them by their words, not by these names.
var assistantTools = []toolSpec{
	{Name: "client__now", Description: "The user's local time and time zone, read from their browser's clock.",
		Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
	{Name: "demo__transfer", Description: "Send money to someone (demo: nothing is really sent). Amounts over 100 need a human's approval.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number","exclusiveMinimum":0},"to":{"type":"string"}},"required":["amount","to"]}`)},
	{Name: "demo__weather", Description: "Current weather or forecast for a city (made-up demo data).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","default":"Paris"}},"required":["city"]}`)},
}

func TestChooseToolAndArguments(t *testing.T) {
	tests := []struct {
		msg, tool, args string
	}{
		{"What's the weather in Paris?", "demo__weather", `{"city":"Paris"}`},
		{"What's the weather in Tokyo?", "demo__weather", `{"city":"Tokyo"}`},
		{"weather in new york today please", "demo__weather", `{"city":"new york"}`},
		{"How is the WEATHER for São Paulo.", "demo__weather", `{"city":"São Paulo"}`},
		{"what's the weather like", "demo__weather", `{"city":"Paris"}`}, // the schema's default
		{"forecast at Rio de Janeiro", "demo__weather", `{"city":"Rio de Janeiro"}`},
		{"weather in Paris at this time", "demo__weather", `{"city":"Paris"}`},
		{"What time is it?", "client__now", `{}`},
		{"check the clock", "client__now", `{}`},
		{"Send 250 to Bob", "demo__transfer", `{"amount":250,"to":"Bob"}`},
		{"Please transfer $1,000.50 to Alice Smith now!", "demo__transfer", `{"amount":1000.5,"to":"Alice Smith"}`},
		{"send 12.5 euros to carol, thanks", "demo__transfer", `{"amount":12.5,"to":"carol"}`},
		// "send" comes first: it wins the tie with "time".
		{"send 40€ to Dave at the time you like", "demo__transfer", `{"amount":40,"to":"Dave"}`},
		{"transfer 7 to Eve in Berlin", "demo__transfer", `{"amount":7,"to":"Eve"}`},
		// No amount: the required number is left out and the call is refused downstream.
		{"send it to Bob", "demo__transfer", `{"to":"Bob"}`},
		// No tool's words: a text answer.
		{"sometimes I wonder", "", ""},
		{"hello there", "", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		got := chooseTool(assistantTools, toolChoice{}, tt.msg)
		if tt.tool == "" {
			if got != nil {
				t.Errorf("%q: chose %s, want a text answer", tt.msg, got.Name)
			}
			continue
		}
		if got == nil || got.Name != tt.tool {
			t.Errorf("%q: chose %v, want %s", tt.msg, got, tt.tool)
			continue
		}
		if args := toolArguments(got, tt.msg); args != tt.args {
			t.Errorf("%q: arguments %s, want %s", tt.msg, args, tt.args)
		}
	}
}

// A planner's tools: other agents offered as call_<agent_id> functions
// taking {message}, chosen by their descriptions.
func TestChooseToolForAPlanner(t *testing.T) {
	params := json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`)
	tools := []toolSpec{
		{Name: "call_researcher", Description: "Researcher: finds papers and summarises research on a topic.", Parameters: params},
		{Name: "call_coder", Description: "Coder: writes and reviews Go code.", Parameters: params},
	}
	got := chooseTool(tools, toolChoice{}, "Please review this code for me")
	if got == nil || got.Name != "call_coder" {
		t.Fatalf("chose %v", got)
	}
	if args := toolArguments(got, "Please review this code for me"); args != `{"message":"Please review this code for me"}` {
		t.Errorf("arguments %s", args)
	}
	if got := chooseTool(tools, toolChoice{}, "find papers about ants"); got == nil || got.Name != "call_researcher" {
		t.Errorf("chose %v", got)
	}
}

func TestToolChoice(t *testing.T) {
	for _, tt := range []struct {
		raw, msg, want string
	}{
		{`"none"`, "Send 250 to Bob", ""},
		{`"auto"`, "Send 250 to Bob", "demo__transfer"},
		{`"required"`, "hello", "client__now"},
		{`{"type":"function","function":{"name":"demo__weather"}}`, "Send 250 to Bob", "demo__weather"},
		{`{"type":"function","name":"demo__weather"}`, "hello", "demo__weather"},
	} {
		got := chooseTool(assistantTools, parseToolChoice(json.RawMessage(tt.raw)), tt.msg)
		name := ""
		if got != nil {
			name = got.Name
		}
		if name != tt.want {
			t.Errorf("tool_choice %s, %q: chose %q, want %q", tt.raw, tt.msg, name, tt.want)
		}
	}
}

func TestArgumentsByType(t *testing.T) {
	tool := toolSpec{Name: "book", Description: "Book a table", Parameters: json.RawMessage(
		`{"type":"object","properties":{"size":{"enum":["small","large"]},"people":{"type":"integer"},"hour":{"type":["integer","null"]},"vip":{"type":"boolean"},"tags":{"type":"array"},"query":{"type":"string"}},"required":["vip","tags"]}`)}
	got := toolArguments(&tool, "book a LARGE table for 4 at 19")
	want := `{"size":"large","people":4,"hour":19,"vip":false,"tags":[],"query":"book a LARGE table for 4 at 19"}`
	if got != want {
		t.Errorf("arguments\n got %s\nwant %s", got, want)
	}
}

func TestToolReplySpellsOutObjects(t *testing.T) {
	for in, want := range map[string]string{
		`sunny, 24C`:                                          "Tool result: sunny, 24C",
		`{"city":"Paris","temp_c":14,"ok":true}`:              "Tool result: city: Paris, temp_c: 14, ok: true",
		`{"error":{"code":"rejected","message":"not today"}}`: "Tool result: error.code: rejected, error.message: not today",
		`{"list":[1,2]}`:                                      "Tool result: list: [1,2]",
		`{"broken":`:                                          `Tool result: {"broken":`,
	} {
		if got := ToolReply(in); got != want {
			t.Errorf("ToolReply(%s) = %q, want %q", in, got, want)
		}
	}
}
