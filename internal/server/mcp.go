package server

import (
	"context"
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/mcpclient"
)

// loadConfigMCPServers registers the config file's MCP servers (a YAML
// sequence under `mcp_servers:`), each checked exactly as PUT
// /v1/mcp_servers/{name} checks it: the YAML is read as JSON would be, so
// an unknown field is refused the same way.
func loadConfigMCPServers(ctx context.Context, m *mcpclient.Manager, node *yaml.Node) error {
	if node == nil || node.Kind == 0 {
		return nil
	}
	if node.Kind != yaml.SequenceNode {
		return fmt.Errorf("config file: mcp_servers must be a list (line %d)", node.Line)
	}
	for i, item := range node.Content {
		var v any
		if err := item.Decode(&v); err != nil {
			return fmt.Errorf("config file mcp_servers[%d] (line %d): %w", i, item.Line, err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("config file mcp_servers[%d] (line %d): %w", i, item.Line, err)
		}
		spec, err := mcpclient.DecodeSpec(raw)
		if err != nil {
			return fmt.Errorf("config file mcp_servers[%d] (line %d): %w", i, item.Line, err)
		}
		if _, _, err := m.Put(ctx, spec); err != nil {
			return fmt.Errorf("config file MCP server %s (line %d): %w", spec.Name, item.Line, err)
		}
	}
	return nil
}
