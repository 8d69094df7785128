package toolsvc

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// toolResult is what this process reads of a committed tool_result.
type toolResult struct {
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	State      string `json:"state"`
	DurationMS int64  `json:"duration_ms"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// committed is the log's hook for the events this process commits (after
// the commit, on the writer goroutine: it must not block). A tool_result
// ends a call: its long-polls look again, its MCP request in flight here
// is cancelled, it is counted and, when it did not succeed, logged; an
// approval_decision is counted. Each tool_result is decoded once for all
// of these — its payload carries the call's result, and three decodings
// of it were 4 % of the server's CPU per sequential tool call (issue 13).
func (s *Service) committed(evs []store.Event) {
	for i := range evs {
		switch evs[i].Type {
		case eventlog.TypeToolResult:
			var r toolResult
			if json.Unmarshal(evs[i].Payload, &r) != nil {
				continue
			}
			s.waiters.ended(r.ToolCallID)
			s.inflight.ended(r.ToolCallID)
			s.countResult(&r)
			s.logResult(&evs[i], &r)
		case eventlog.TypeApprovalDecision:
			s.countApproval(evs[i].Payload)
		}
	}
}

// logResult logs a call that ended without success, once, from the
// process that committed its end, whichever path ended it (a step, the
// sweeper, a run's end): DESIGN §14's tool_call_id, run_id and session_id
// with the code, so a failure can be found from any of them. A failure
// of the tool's side (FAILED, TIMEOUT) is a warning; a decision (BLOCKED,
// REJECTED, EXPIRED, CANCELLED) is information.
func (s *Service) logResult(ev *store.Event, r *toolResult) {
	if r.State == store.ToolCallSucceeded {
		return
	}
	level := slog.LevelInfo
	if r.State == store.ToolCallFailed || r.State == store.ToolCallTimeout {
		level = slog.LevelWarn
	}
	code, message := strings.ToLower(r.State), ""
	if r.Error != nil {
		code, message = r.Error.Code, truncate(r.Error.Message, 512)
	}
	// The run's trace (its agent invoke's span, while the run is active
	// here) gives the line its trace_id.
	s.opts.Logger.LogAttrs(s.runTrace(context.Background(), ev.RunID), level, "tool call failed",
		slog.String("tool_call_id", r.ToolCallID), slog.String("run_id", ev.RunID), slog.String("session_id", ev.SessionID),
		slog.String("tool_name", r.ToolName), slog.String("state", r.State), slog.String("code", code),
		slog.String("message", message), slog.Int64("duration_ms", r.DurationMS))
}
