package fakellm

import (
	"encoding/json"
	"testing"
)

// The demo's MCP tools, spelt as GET /v1/tools spells "{server}@{tool}":
// their words are those after "--", never the server's.
var mcpTools = append([]toolSpec{
	{Name: "demo_mcp--lookup_order", Description: "Look up a customer's order by its number: the item, the total and where it is (made-up data).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"integer","description":"the order number, e.g. 1042"}},"required":["order_id"],"additionalProperties":false}`)},
	{Name: "demo_mcp--refund", Description: "Refund a customer's purchase in full (nothing is really paid back). Every refund needs a human's approval.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"integer","description":"the order number, e.g. 1042"}},"required":["order_id"],"additionalProperties":false}`)},
}, assistantTools...)

func TestChooseMCPTools(t *testing.T) {
	for _, tt := range []struct{ msg, tool, args string }{
		{"Look up order 1042", "demo_mcp--lookup_order", `{"order_id":1042}`},
		{"where is my order 77?", "demo_mcp--lookup_order", `{"order_id":77}`},
		{"Refund order 1042", "demo_mcp--refund", `{"order_id":1042}`},
		{"What's the weather in Paris?", "demo__weather", `{"city":"Paris"}`},
		{"Send 250 to Bob", "demo__transfer", `{"amount":250,"to":"Bob"}`},
		{"What time is it?", "client__now", `{}`},
		// The server's name is not a word of its tools.
		{"mcp", "", ""},
	} {
		got := chooseTool(mcpTools, toolChoice{}, tt.msg)
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
