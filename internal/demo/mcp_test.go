package demo

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The demo's MCP server answers over Streamable HTTP: the same order every
// time, one refund per order however often it is asked for.
func TestDemoMCPServer(t *testing.T) {
	srv := httptest.NewServer(newMCPServer())
	defer srv.Close()
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || len(lt.Tools) != 2 || lt.Tools[0].Name != "lookup_order" || lt.Tools[1].Name != "refund" {
		t.Fatalf("tools: %+v %v", lt, err)
	}
	call := func(name string, args any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	a, b := call("lookup_order", map[string]any{"order_id": 1042}), call("lookup_order", map[string]any{"order_id": 1042})
	if a["order_id"] != 1042.0 || a["item"] == "" || a["status"] != b["status"] || a["total"] != b["total"] {
		t.Fatalf("lookups %v and %v", a, b)
	}
	r1, r2 := call("refund", map[string]any{"order_id": 1042}), call("refund", map[string]any{"order_id": 1042})
	if r1["refund_id"] != "rf_0001" || r2["refund_id"] != "rf_0001" || r1["amount"] != a["total"] || r1["status"] != "refunded" {
		t.Fatalf("refunds %v and %v", r1, r2)
	}
	if r := call("refund", map[string]any{"order_id": 7}); r["refund_id"] != "rf_0002" {
		t.Fatalf("another order's refund %v", r)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": 0}})
	if err != nil || !res.IsError {
		t.Fatalf("order 0: %+v %v", res, err)
	}
}

// The model is told an MCP result's structured content, or its text.
func TestMCPToolMessage(t *testing.T) {
	for in, want := range map[string]string{
		`{"content":[{"type":"text","text":"{\"a\":1}"}],"structuredContent":{"a":1}}`:                        `{"a":1}`,
		`{"content":[{"type":"text","text":"one"},{"type":"image","data":"x"},{"type":"text","text":"two"}]}`: "one\ntwo",
		`{"city":"Paris"}`: `{"city":"Paris"}`,
		`"plain"`:          `"plain"`,
	} {
		if got := mcpToolMessage(json.RawMessage(in)); got != want {
			t.Errorf("%s → %q, want %q", in, got, want)
		}
	}
}
