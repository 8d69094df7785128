package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// callTool calls rt's tool for the run and tells the user what came of it:
// a state event before the call (and one more when it has to wait), then
// the answer as deltas. A failed call is explained, not fatal: the tools
// are registered with on_failure "return_to_agent" for this.
func callTool(ctx context.Context, c *agentplane.Client, s agentplane.Stream, rt route) error {
	if err := s.State("calling_tool", map[string]any{"tool": rt.Tool, "args": rt.Args}); err != nil {
		return err
	}
	onPending := agentplane.WithOnPending(func(tc agentplane.ToolCall) {
		s.State("waiting_for_tool", map[string]any{"tool": rt.Tool, "tool_call_id": tc.ToolCallID, "state": tc.State, "approval_id": tc.ApprovalID})
		if tc.State == "WAITING_APPROVAL" {
			s.Delta(fmt.Sprintf("Transfers over %d need a human's approval, so I'm waiting for a decision…\n", TransferApprovalThreshold))
		}
	})
	res, err := c.Tools().Invoke(ctx, rt.Tool, rt.Args, onPending)
	if err != nil {
		if ctx.Err() != nil {
			return err // the run was cancelled: nobody is listening
		}
		return s.Delta(explainFailure(rt, err))
	}
	return s.Delta(describeResult(rt, res))
}

// describeResult puts a tool's answer into words.
func describeResult(rt route, res json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(res, &m) != nil {
		m = nil
	}
	switch rt.Tool {
	case ToolWeather:
		if m != nil {
			return fmt.Sprintf("The weather in %v: %v °C, %v, humidity %v %%, wind %v km/h (made-up demo data).",
				m["city"], m["temp_c"], m["conditions"], m["humidity_pct"], m["wind_kph"])
		}
	case ToolNow:
		// The chat page answers {iso, epoch_ms, time_zone, utc_offset_minutes,
		// locale}; other clients may differ, so read the usual names and
		// fall back to the raw answer.
		when := firstString(m, "local", "time", "iso", "now")
		if t, err := time.Parse(time.RFC3339, when); err == nil {
			when = t.Format("15:04 on Monday 2 January 2006") // iso carries the browser's offset
		}
		zone := firstString(m, "time_zone", "timezone", "tz")
		switch {
		case when != "" && zone != "":
			return fmt.Sprintf("Your browser says it is %s (%s).", when, zone)
		case when != "":
			return fmt.Sprintf("Your browser says it is %s.", when)
		}
		var str string
		if json.Unmarshal(res, &str) == nil && str != "" {
			return "Your browser says it is " + str + "."
		}
		return "Your browser answered: " + string(res)
	case ToolTransfer:
		if m != nil {
			return fmt.Sprintf("Done: sent %s to %v (transfer %v, demo money only).", formatAmount(m["amount"]), m["to"], m["transfer_id"])
		}
	}
	return fmt.Sprintf("%s answered: %s", rt.Tool, res)
}

// explainFailure answers kindly when a tool call did not work out.
func explainFailure(rt route, err error) string {
	what := "the " + rt.Tool + " call"
	switch rt.Tool {
	case ToolTransfer:
		what = fmt.Sprintf("the transfer of %s to %v", formatAmount(rt.Args["amount"]), rt.Args["to"])
	case ToolWeather:
		what = fmt.Sprintf("the weather lookup for %v", rt.Args["city"])
	case ToolNow:
		what = "reading your browser's clock"
	}
	var te *agentplane.ToolError
	if errors.As(err, &te) {
		var why string
		switch te.Code {
		case "rejected":
			why = "was rejected by the approver"
		case "expired":
			why = "expired: nobody approved it in time"
		case "blocked":
			why = "is blocked by policy"
		case "client_offline":
			why = "needs your browser to be connected, and it isn't"
		case "timeout":
			why = "timed out"
		case "cancelled":
			why = "was cancelled"
		default:
			why = "failed"
		}
		if te.Message != "" {
			why += ": " + strings.TrimRight(te.Message, ".")
		}
		return fmt.Sprintf("Sorry, %s %s (code %q).", what, why, te.Code)
	}
	var ae *agentplane.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("Sorry, the platform refused %s (code %q): %s", what, ae.Code, ae.Message)
	}
	return fmt.Sprintf("Sorry, %s failed: %v", what, err)
}

func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if v, ok := m[k].(string); ok && v != "" {
			return v
		}
	}
	return ""
}

// formatAmount prints 250 as "250" and 12.5 as "12.50".
func formatAmount(v any) string {
	f, ok := v.(float64)
	if !ok {
		return fmt.Sprint(v)
	}
	if f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 2, 64), ".00")
}
