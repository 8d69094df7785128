package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"text/tabwriter"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/tool"
)

func (c *apiClient) tools(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("agentplane tools put|list")
	}
	switch args[0] {
	case "list":
		return c.toolsList(ctx, args[1:])
	case "put":
		return c.toolsPut(ctx, args[1:])
	}
	return usageError("agentplane tools put|list (not " + args[0] + ")")
}

func (c *apiClient) toolsList(ctx context.Context, args []string) error {
	fs := newFlags(c, "tools list")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	items, err := c.listPages(ctx, "/v1/tools", url.Values{}, "tools", 0)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(items)
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tKIND\tPOLICY\tRULES\tTIMEOUT\tDESCRIPTION")
	for _, raw := range items {
		var d tool.Definition
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dms\t%s\n", d.Name, d.Kind, d.Policy.Decision, len(d.Policy.Rules), d.TimeoutMS, d.Description)
	}
	return tw.Flush()
}

// toolsPut registers tools from a file (or stdin with "-"): one definition
// or a list of them, as JSON or as YAML (the config file's form, also its
// whole `tools:` section). JSON is sent as written; YAML is converted with
// the config file's decoder, so unknown fields are refused here already.
func (c *apiClient) toolsPut(ctx context.Context, args []string) error {
	fs := newFlags(c, "tools put")
	name := fs.String("name", "", "the tool's name, when the definition has no tool_name (one definition only)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("agentplane tools put FILE|- [--name NAME]   (JSON or YAML: a definition, a list, or tools: [...])")
	}
	raw, err := readInput(pos[0])
	if err != nil {
		return err
	}
	defs, err := toolDefinitions(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	if *name != "" && len(defs) != 1 {
		return fmt.Errorf("--name takes one definition; %s has %d", pos[0], len(defs))
	}
	var out []json.RawMessage
	for _, def := range defs {
		var head struct {
			Name string `json:"tool_name"`
		}
		_ = json.Unmarshal(def, &head)
		n := head.Name
		if *name != "" {
			n = *name
		}
		if n == "" {
			return fmt.Errorf("a definition has no tool_name (give --name)")
		}
		var resp json.RawMessage
		if err := c.do(ctx, "PUT", "/v1/tools/"+url.PathEscape(n), def, &resp); err != nil {
			return fmt.Errorf("tool %s: %w", n, err)
		}
		out = append(out, resp)
		if !c.json {
			fmt.Fprintf(c.out, "put tool %s\n", n)
		}
	}
	if c.json {
		return c.printJSON(out)
	}
	return nil
}

// toolDefinitions splits a file into JSON definitions.
func toolDefinitions(raw []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if json.Valid(trimmed) {
		if len(trimmed) > 0 && trimmed[0] == '[' {
			var list []json.RawMessage
			if err := json.Unmarshal(trimmed, &list); err != nil {
				return nil, err
			}
			return list, nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &obj); err != nil {
			return nil, fmt.Errorf("a definition must be a JSON object or a list of them")
		}
		if list, ok := obj["tools"]; ok && obj["tool_name"] == nil {
			return toolDefinitions(list)
		}
		return []json.RawMessage{json.RawMessage(trimmed)}, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("neither JSON nor YAML: %w", err)
	}
	node := &doc
	if node.Kind == yaml.DocumentNode && len(node.Content) == 1 {
		node = node.Content[0]
	}
	if node.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == "tools" && !hasKey(node, "tool_name") {
				node = node.Content[i+1]
				break
			}
		}
	}
	var nodes []*yaml.Node
	switch node.Kind {
	case yaml.SequenceNode:
		nodes = node.Content
	case yaml.MappingNode:
		nodes = []*yaml.Node{node}
	default:
		return nil, fmt.Errorf("a definition must be a mapping or a list of them")
	}
	var out []json.RawMessage
	for _, n := range nodes {
		def, err := tool.DefinitionFromYAML(n)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(def)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}
