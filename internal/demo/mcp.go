package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The demo's MCP server (issue 12): a go-sdk server over Streamable HTTP
// on its own loopback port, registered by RegisterMCPServer through the
// admin API as an operator would register any MCP server. Its tools reach
// the demo agent as demo_mcp@lookup_order and demo_mcp@refund; a per-tool
// override puts every refund behind a human's approval.
const (
	// MCPServerName is the demo MCP server's name.
	MCPServerName = "demo_mcp"
	// ToolLookupOrder and ToolRefund are its tools, as the platform names them.
	ToolLookupOrder = MCPServerName + "@lookup_order"
	ToolRefund      = MCPServerName + "@refund"
)

type orderIn struct {
	OrderID int `json:"order_id" jsonschema:"the order number, e.g. 1042"`
}

// order is a made-up order: the same number always gets the same one.
type order struct {
	OrderID int     `json:"order_id"`
	Item    string  `json:"item"`
	Total   float64 `json:"total"`
	Status  string  `json:"status"`
	Source  string  `json:"source"`
}

type refund struct {
	RefundID string  `json:"refund_id"`
	OrderID  int     `json:"order_id"`
	Amount   float64 `json:"amount"`
	Status   string  `json:"status"`
}

var items = []string{"a blue kettle", "two paperbacks", "a desk lamp", "running shoes", "a coffee grinder", "a rain jacket"}
var orderStatuses = []string{"processing", "shipped", "delivered"}

func lookupOrder(id int) order {
	h := fnv.New32a()
	fmt.Fprint(h, id)
	n := h.Sum32()
	return order{OrderID: id, Item: items[n%uint32(len(items))], Total: float64(10+n%90) + 0.99,
		Status: orderStatuses[(n>>8)%uint32(len(orderStatuses))], Source: "agentplane demo (made-up data)"}
}

// newMCPServer is the demo's MCP server. Refunds are idempotent per order
// (a refund repeated for one order returns the first).
func newMCPServer() http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "agentplane-demo-orders", Version: "1.0.0"}, nil)
	var mu sync.Mutex
	refunds := map[int]refund{}
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_order", Description: "Look up a customer's order by its number: the item, the total and where it is (made-up data)."},
		func(ctx context.Context, req *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, order, error) {
			if in.OrderID <= 0 {
				return nil, order{}, fmt.Errorf("order_id must be a positive order number")
			}
			return nil, lookupOrder(in.OrderID), nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "refund", Description: "Refund a customer's purchase in full (nothing is really paid back). Every refund needs a human's approval."},
		func(ctx context.Context, req *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, refund, error) {
			if in.OrderID <= 0 {
				return nil, refund{}, fmt.Errorf("order_id must be a positive order number")
			}
			mu.Lock()
			defer mu.Unlock()
			if r, ok := refunds[in.OrderID]; ok {
				return nil, r, nil
			}
			r := refund{RefundID: fmt.Sprintf("rf_%04d", len(refunds)+1), OrderID: in.OrderID, Amount: lookupOrder(in.OrderID).Total, Status: "refunded"}
			refunds[in.OrderID] = r
			return nil, r, nil
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// RegisterMCPServer registers the demo's MCP server at mcpURL with the
// platform at platformURL (PUT /v1/mcp_servers/demo_mcp with the admin
// key), and the override that puts refunds behind an approval (PUT
// /v1/tools/demo_mcp@refund). Registering again changes nothing.
func RegisterMCPServer(ctx context.Context, platformURL, adminKey, mcpURL string) error {
	server := map[string]any{
		"transport": "streamable_http", "url": mcpURL, "timeout_ms": 10_000,
		// As for the other demo tools: a rejected refund is the model's to explain.
		"on_failure": "return_to_agent",
	}
	if err := adminPUT(ctx, platformURL, adminKey, "/v1/mcp_servers/"+MCPServerName, server); err != nil {
		return fmt.Errorf("register MCP server %s: %w", MCPServerName, err)
	}
	override := map[string]any{"kind": "mcp", "policy": map[string]any{"decision": "require_approval"}, "approval_timeout_ms": 300_000}
	if err := adminPUT(ctx, platformURL, adminKey, "/v1/tools/"+url.PathEscape(ToolRefund), override); err != nil {
		return fmt.Errorf("register the policy of %s: %w", ToolRefund, err)
	}
	return nil
}

func adminPUT(ctx context.Context, platformURL, adminKey, path string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	u := strings.TrimRight(platformURL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("PUT %s: HTTP %d: %s", u, resp.StatusCode, bytes.TrimSpace(b))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return nil
}
