package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/toolsvc"
)

// How ended calls are answered: an MCP server's tool with its own content,
// any other tool as JSON text (and structuredContent when an object), a
// failure as isError with code and message.
func TestResult(t *testing.T) {
	// An MCP tool's result: its content and structuredContent, as sent.
	r := result(&toolsvc.CallView{ToolCallID: "tc_1", ToolName: "files@read", Status: toolsvc.StatusSucceeded,
		Result: json.RawMessage(`{"content":[{"type":"text","text":"hi"},{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}],"structuredContent":{"n":1}}`)})
	if r.IsError || len(r.Content) != 2 || r.Meta[MetaToolCallID] != "tc_1" {
		t.Fatalf("MCP tool: %+v", r)
	}
	if img, ok := r.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || string(img.Data) != "\x89PNG\r\n\x1a\n" {
		t.Fatalf("image block: %#v", r.Content[1])
	}
	if b, _ := json.Marshal(r.StructuredContent); string(b) != `{"n":1}` {
		t.Fatalf("structuredContent %s", b)
	}

	// Any other tool: its JSON as text, an object also as structuredContent.
	r = result(&toolsvc.CallView{ToolCallID: "tc_2", ToolName: "demo.weather", Status: toolsvc.StatusSucceeded, Result: json.RawMessage(`{"city":"Paris"}`)})
	if r.IsError || r.Content[0].(*mcp.TextContent).Text != `{"city":"Paris"}` {
		t.Fatalf("object result: %+v", r)
	}
	if b, _ := json.Marshal(r.StructuredContent); string(b) != `{"city":"Paris"}` {
		t.Fatalf("structuredContent %s", b)
	}
	r = result(&toolsvc.CallView{ToolCallID: "tc_3", ToolName: "x", Status: toolsvc.StatusSucceeded, Result: json.RawMessage(`[1,2]`)})
	if r.StructuredContent != nil || r.Content[0].(*mcp.TextContent).Text != `[1,2]` {
		t.Fatalf("array result: %+v", r)
	}

	// A failure: isError, {"error": {code, message, detail, tool_call_id}}.
	r = result(&toolsvc.CallView{ToolCallID: "tc_4", ToolName: "pay", Status: toolsvc.StatusFailed, State: "REJECTED",
		Error: &toolsvc.CallError{Code: "rejected", Message: "rejected by alice", Detail: json.RawMessage(`{"why":"no"}`)}})
	var body struct {
		Error struct {
			ToolCallID string `json:"tool_call_id"`
			Detail     map[string]any
		}
	}
	text := r.Content[0].(*mcp.TextContent).Text
	if !r.IsError || json.Unmarshal([]byte(text), &body) != nil || body.Error.ToolCallID != "tc_4" || body.Error.Detail["why"] != "no" {
		t.Fatalf("failure: %+v %s", r, text)
	}
	var m map[string]map[string]any
	json.Unmarshal([]byte(text), &m)
	if m["error"]["code"] != "rejected" || m["error"]["message"] != "rejected by alice" {
		t.Fatalf("failure text %s", text)
	}
}

// A refused invoke keeps what the HTTP refusal adds to its error object:
// run_not_active names the run and the status it ended with, so the model
// (and a program) learns why; a refusal without details is as before.
func TestRefusalKeepsDetails(t *testing.T) {
	e := *toolsvc.ErrRunNotActive
	e.Details = map[string]any{"run_id": "run_1", "status": "CANCELLED", "code": "not this one"}
	r := refusal(&e)
	var got struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.Content[0].(*mcp.TextContent).Text), &got); err != nil || !r.IsError {
		t.Fatalf("refusal: %+v %v", r, err)
	}
	if got.Error["code"] != "run_not_active" || got.Error["run_id"] != "run_1" || got.Error["status"] != "CANCELLED" || got.Error["message"] != e.Message {
		t.Fatalf("refusal's error %v", got.Error)
	}
	if b, _ := json.Marshal(r.StructuredContent); string(b) != r.Content[0].(*mcp.TextContent).Text {
		t.Fatalf("structuredContent %s differs from the text", b)
	}
	r = refusal(toolsvc.ErrToolForbidden)
	if b, _ := json.Marshal(r.StructuredContent); string(b) != `{"error":{"code":"forbidden","message":"this agent may not call the tool"}}` {
		t.Fatalf("a refusal without details: %s", b)
	}
}
