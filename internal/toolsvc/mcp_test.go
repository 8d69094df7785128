package toolsvc

import (
	"encoding/json"
	"testing"
)

// The recorded result of an MCP call is its content blocks and, when the
// server sent one, its structuredContent — valid JSON in every case.
func TestMCPResultJSON(t *testing.T) {
	for _, c := range []struct {
		res  MCPResult
		want string
	}{
		{MCPResult{Content: json.RawMessage(`[{"type":"text","text":"a <b> & c"}]`)}, `{"content":[{"type":"text","text":"a <b> & c"}]}`},
		{MCPResult{Content: json.RawMessage(`[]`), StructuredContent: json.RawMessage(`{"ok":true}`)}, `{"content":[],"structuredContent":{"ok":true}}`},
		{MCPResult{}, `{"content":[]}`},
	} {
		got := c.res.JSON()
		if string(got) != c.want || !json.Valid(got) {
			t.Errorf("%+v: %s, want %s", c.res, got, c.want)
		}
	}
}
