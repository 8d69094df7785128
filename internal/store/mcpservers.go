package store

import "encoding/json"

// MCPServerRow is a registered MCP server (DESIGN §13): a tool source the
// platform connects to. Spec is the administrator's JSON (transport, url
// or command, policy, …), opaque to the store (package mcpclient reads it)
// and returned byte for byte.
type MCPServerRow struct {
	Name      string          `json:"name"`
	Spec      json.RawMessage `json:"spec"`
	CreatedAt int64           `json:"created_at"`
	UpdatedAt int64           `json:"updated_at"`
}

// MCPServerPutParams registers an MCP server or replaces its spec.
type MCPServerPutParams struct {
	Name string
	Spec json.RawMessage
	At   int64
}
