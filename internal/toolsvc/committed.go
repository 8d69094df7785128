package toolsvc

import (
	"encoding/json"

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
		Code string `json:"code"`
	} `json:"error"`
}

// committed is the log's hook for the events this process commits (after
// the commit, on the writer goroutine: it must not block). A tool_result
// ends a call: its long-polls look again, its MCP request in flight here
// is cancelled, and it is counted; an approval_decision is counted. Each
// tool_result is decoded once for all three — its payload carries the
// call's result, and three decodings of it were 4 % of the server's CPU
// per sequential tool call (issue 13).
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
		case eventlog.TypeApprovalDecision:
			s.countApproval(evs[i].Payload)
		}
	}
}
