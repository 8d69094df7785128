package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
)

// agentRow is what the agent commands read of an agent.
type agentRow struct {
	AgentID         string   `json:"agent_id"`
	Name            string   `json:"name"`
	Endpoint        string   `json:"endpoint"`
	Status          string   `json:"status"`
	LinkedAgents    []string `json:"linked_agents"`
	LastHeartbeatAt int64    `json:"last_heartbeat_at"`
}

func (c *apiClient) agents(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("agentplane agents register|list")
	}
	switch args[0] {
	case "list":
		return c.agentsList(ctx, args[1:])
	case "register":
		return c.agentsRegister(ctx, args[1:])
	}
	return usageError("agentplane agents register|list (not " + args[0] + ")")
}

func (c *apiClient) agentsList(ctx context.Context, args []string) error {
	fs := newFlags(c, "agents list")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	items, err := c.listPages(ctx, "/v1/agents", url.Values{}, "agents", 0)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(items)
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATUS\tENDPOINT\tLINKED\tLAST HEARTBEAT")
	for _, raw := range items {
		var a agentRow
		if err := json.Unmarshal(raw, &a); err != nil {
			return err
		}
		linked := strings.Join(a.LinkedAgents, ",")
		if linked == "" {
			linked = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.AgentID, a.Status, a.Endpoint, linked, when(a.LastHeartbeatAt))
	}
	return tw.Flush()
}

// agentsRegister registers (or updates) an agent from flags, or from a
// JSON file with the body of POST /v1/agents/register (flags override).
func (c *apiClient) agentsRegister(ctx context.Context, args []string) error {
	fs := newFlags(c, "agents register")
	id := fs.String("id", "", "agent id")
	name := fs.String("name", "", "display name (default: the id)")
	endpoint := fs.String("endpoint", "", "the agent's base URL (it serves POST /invoke and GET /health)")
	caps := fs.String("capabilities", "", "comma-separated capabilities")
	linked := fs.String("linked", "", "comma-separated ids of the agents it may call")
	rotate := fs.Bool("rotate-key", false, "issue a new key (the old one stops working)")
	file := fs.String("file", "", "a JSON file with the registration body ('-' for stdin)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	body := map[string]any{}
	if *file != "" {
		raw, err := readInput(*file)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return fmt.Errorf("%s: %w", *file, err)
		}
	}
	if len(pos) > 0 && *id == "" {
		*id = pos[0]
	}
	set := func(k, v string) {
		if v != "" {
			body[k] = v
		}
	}
	set("agent_id", *id)
	set("name", *name)
	set("endpoint", *endpoint)
	if *caps != "" {
		body["capabilities"] = splitList(*caps)
	}
	if *linked != "" {
		body["linked_agents"] = splitList(*linked)
	}
	if *rotate {
		body["rotate_key"] = true
	}
	if body["agent_id"] == nil || body["endpoint"] == nil {
		return usageError("agentplane agents register --id ID --endpoint URL [--name N] [--capabilities a,b] [--linked a,b] [--rotate-key] (or --file FILE)")
	}
	var resp struct {
		AgentID     string          `json:"agent_id"`
		AgentAPIKey string          `json:"agent_api_key"`
		Created     bool            `json:"created"`
		Agent       json.RawMessage `json:"agent"`
	}
	if err := c.do(ctx, "POST", "/v1/agents/register", body, &resp); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp)
	}
	verb := "updated"
	if resp.Created {
		verb = "registered"
	}
	fmt.Fprintf(c.out, "%s agent %s\n", verb, resp.AgentID)
	if resp.AgentAPIKey != "" {
		fmt.Fprintf(c.out, "agent key (shown once): %s\n", resp.AgentAPIKey)
	}
	return nil
}

func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readInput reads a file, or stdin for "-".
func readInput(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}
