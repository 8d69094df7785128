package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
)

type approvalRow struct {
	ApprovalID  string `json:"approval_id"`
	RunID       string `json:"run_id"`
	SessionID   string `json:"session_id"`
	ToolName    string `json:"tool_name"`
	Status      string `json:"status"`
	ArgsSummary string `json:"args_summary"`
	ExpiresAt   int64  `json:"expires_at"`
	DecidedBy   string `json:"decided_by"`
	Reason      string `json:"reason"`
	CreatedAt   int64  `json:"created_at"`
}

func (c *apiClient) approvals(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("agentplane approvals list|decide")
	}
	switch args[0] {
	case "list":
		return c.approvalsList(ctx, args[1:])
	case "decide":
		return c.approvalsDecide(ctx, args[1:])
	}
	return usageError("agentplane approvals list|decide (not " + args[0] + ")")
}

func (c *apiClient) approvalsList(ctx context.Context, args []string) error {
	fs := newFlags(c, "approvals list")
	status := fs.String("status", "PENDING", "PENDING, APPROVED, REJECTED, EXPIRED, CANCELLED, or all")
	session := fs.String("session", "", "only this session's")
	limit := fs.Int("limit", 0, "at most this many (0: all)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	if s := strings.ToUpper(*status); s != "ALL" && s != "" {
		q.Set("status", s)
	}
	if *session != "" {
		q.Set("session_id", *session)
	}
	items, err := c.listPages(ctx, "/v1/approvals", q, "approvals", *limit)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(items)
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APPROVAL\tSTATUS\tTOOL\tARGS\tSESSION\tCREATED\tEXPIRES\tDECIDED BY")
	for _, raw := range items {
		var a approvalRow
		if err := json.Unmarshal(raw, &a); err != nil {
			return err
		}
		by := a.DecidedBy
		if by == "" {
			by = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ApprovalID, a.Status, a.ToolName, a.ArgsSummary, a.SessionID, when(a.CreatedAt), when(a.ExpiresAt), by)
	}
	return tw.Flush()
}

func (c *apiClient) approvalsDecide(ctx context.Context, args []string) error {
	fs := newFlags(c, "approvals decide")
	reason := fs.String("reason", "", "why (recorded with the decision)")
	by := fs.String("by", "", "who decides (recorded as decided_by)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || (pos[1] != "approve" && pos[1] != "reject") {
		return usageError("agentplane approvals decide APPROVAL_ID approve|reject [--reason TEXT] [--by NAME]")
	}
	body := map[string]any{"decision": pos[1], "reason": *reason}
	if *by != "" {
		body["decided_by"] = *by
	}
	var a approvalRow
	var raw json.RawMessage
	if err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(pos[0])+":decide", body, &raw); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(raw)
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "approval %s is %s (tool %s, run %s)\n", a.ApprovalID, a.Status, a.ToolName, a.RunID)
	return nil
}
