package server

import (
	"context"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// loadConfigTools registers the config file's tools (a YAML sequence under
// `tools:`), each checked exactly as PUT /v1/tools/{tool_name} checks it.
func loadConfigTools(ctx context.Context, svc *toolsvc.Service, node *yaml.Node) error {
	if node == nil || node.Kind == 0 {
		return nil
	}
	if node.Kind != yaml.SequenceNode {
		return fmt.Errorf("config file: tools must be a list (line %d)", node.Line)
	}
	for i, item := range node.Content {
		d, err := tool.DefinitionFromYAML(item)
		if err != nil {
			return fmt.Errorf("config file tools[%d] (line %d): %w", i, item.Line, err)
		}
		if _, _, err := svc.PutTool(ctx, d); err != nil {
			return fmt.Errorf("config file tool %s (line %d): %w", d.Name, item.Line, err)
		}
	}
	return nil
}
