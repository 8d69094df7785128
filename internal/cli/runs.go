package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
)

// runNode is a run as GET /v1/runs/{id}/tree shows it (DESIGN §11), and
// the fields of a plain run the commands print.
type runNode struct {
	RunID       string          `json:"run_id"`
	SessionID   string          `json:"session_id,omitempty"`
	AgentID     string          `json:"agent_id"`
	ParentRunID string          `json:"parent_run_id,omitempty"`
	UserID      string          `json:"user_id,omitempty"`
	Status      string          `json:"status"`
	StartedAt   int64           `json:"started_at"`
	EndedAt     int64           `json:"ended_at,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	Usage       json.RawMessage `json:"usage,omitempty"`
	TotalUsage  json.RawMessage `json:"total_usage,omitempty"`
	Children    []*runNode      `json:"children"`
}

func (c *apiClient) runs(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("agentplane runs list|tree")
	}
	switch args[0] {
	case "list":
		return c.runsList(ctx, args[1:])
	case "tree":
		return c.runsTree(ctx, args[1:])
	}
	return usageError("agentplane runs list|tree (not " + args[0] + ")")
}

func (c *apiClient) runsList(ctx context.Context, args []string) error {
	fs := newFlags(c, "runs list")
	session := fs.String("session", "", "only this session's")
	user := fs.String("user", "", "only this user's")
	agent := fs.String("agent", "", "only this agent's")
	status := fs.String("status", "", "active, ended, or run states (RUNNING, DONE, …), comma-separated")
	parent := fs.String("parent", "", "only the children of this run")
	root := fs.Bool("root", false, "only runs without a parent")
	since := fs.String("since", "", "started at or after (RFC 3339, ms, or a duration before now: 24h)")
	until := fs.String("until", "", "started before")
	limit := fs.Int("limit", 50, "at most this many (0: all)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"session_id": *session, "user_id": *user, "agent_id": *agent, "status": *status, "parent_run_id": *parent} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *root {
		q.Set("root", "true")
	}
	if err := timeQuery(q, "since", *since); err != nil {
		return err
	}
	if err := timeQuery(q, "until", *until); err != nil {
		return err
	}
	items, err := c.listPages(ctx, "/v1/runs", q, "runs", *limit)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(items)
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tSESSION\tPARENT\tSTARTED\tDURATION\tERROR")
	for _, raw := range items {
		var r runNode
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, r.AgentID, r.Status, r.SessionID, orDash(r.ParentRunID),
			when(r.StartedAt), duration(r.StartedAt, r.EndedAt), errorCode(r.Error))
	}
	return tw.Flush()
}

// runsTree prints a run and its child runs (GET /v1/runs/{id}/tree). A
// server without that endpoint (before multi-agent runs) gets the tree
// built from GET /v1/runs?session_id=, nested by parent_run_id.
func (c *apiClient) runsTree(ctx context.Context, args []string) error {
	fs := newFlags(c, "runs tree")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("agentplane runs tree RUN [--json]")
	}
	id := pos[0]
	var tree runNode
	err = c.do(ctx, "GET", "/v1/runs/"+url.PathEscape(id)+"/tree", nil, &tree)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code != "run_not_found" {
		t, ferr := c.treeFromList(ctx, id)
		if ferr != nil {
			return ferr
		}
		tree, err = *t, nil
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(tree)
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tDURATION\tUSAGE\tERROR")
	printNode(tw, &tree, "", "")
	return tw.Flush()
}

func printNode(tw *tabwriter.Writer, n *runNode, first, rest string) {
	usage := compactJSON(n.TotalUsage)
	if usage == "" {
		usage = compactJSON(n.Usage)
	}
	fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\n", first, n.RunID, n.AgentID, n.Status, duration(n.StartedAt, n.EndedAt), orDash(usage), errorCode(n.Error))
	for i, ch := range n.Children {
		if i == len(n.Children)-1 {
			printNode(tw, ch, rest+"└─ ", rest+"   ")
		} else {
			printNode(tw, ch, rest+"├─ ", rest+"│  ")
		}
	}
}

// treeFromList builds the subtree of id from its session's runs.
func (c *apiClient) treeFromList(ctx context.Context, id string) (*runNode, error) {
	var root runNode
	if err := c.do(ctx, "GET", "/v1/runs/"+url.PathEscape(id), nil, &root); err != nil {
		return nil, err
	}
	items, err := c.listPages(ctx, "/v1/runs", url.Values{"session_id": {root.SessionID}, "order": {"asc"}}, "runs", 0)
	if err != nil {
		return nil, err
	}
	nodes := map[string]*runNode{}
	var order []*runNode
	for _, raw := range items {
		var r runNode
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		r.Children = []*runNode{}
		nodes[r.RunID] = &r
		order = append(order, &r)
	}
	for _, r := range order {
		if p := nodes[r.ParentRunID]; p != nil && r.ParentRunID != "" {
			p.Children = append(p.Children, r)
		}
	}
	if n := nodes[id]; n != nil {
		return n, nil
	}
	root.Children = []*runNode{}
	return &root, nil
}

func compactJSON(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" || s == "{}" {
		return ""
	}
	return clip(s)
}

func errorCode(raw json.RawMessage) string {
	var e struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Code != "" {
		return e.Code
	}
	return "-"
}
