package toolsvc

import (
	"encoding/json"
	"strings"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// observeMetrics counts tool calls and approvals from the events this
// process commits (a log observer): every final state of a call is a
// tool_result and every outcome of an approval an approval_decision,
// whichever path got there — a step, the sweeper, or a run's end
// cascading in the run manager's transaction — and only once committed.
func (s *Service) observeMetrics(evs []store.Event) {
	for i := range evs {
		switch evs[i].Type {
		case eventlog.TypeToolResult:
			var p struct {
				ToolName   string `json:"tool_name"`
				State      string `json:"state"`
				DurationMS int64  `json:"duration_ms"`
				Error      *struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal(evs[i].Payload, &p) != nil {
				continue
			}
			code := ""
			if p.Error != nil {
				code = p.Error.Code
			}
			s.calls.Inc(p.ToolName, p.State, code)
			s.duration.Observe(float64(p.DurationMS)/1000, p.ToolName, p.State)
			if code == "client_offline" {
				s.offline.Inc(p.ToolName)
			}
		case eventlog.TypeApprovalDecision:
			var p struct {
				ToolName string `json:"tool_name"`
				Decision string `json:"decision"`
				WaitedMS int64  `json:"waited_ms"`
			}
			if json.Unmarshal(evs[i].Payload, &p) == nil {
				s.waited.Observe(float64(p.WaitedMS)/1000, p.ToolName, p.Decision)
			}
		}
	}
}

// runFailedMetrics records a run a tool call's failure ended (the run
// manager records the runs it ends itself).
func (s *Service) runFailedMetrics(run *store.Run) {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(run.Error, &e)
	s.runsEnd.Inc(run.AgentID, store.RunFailed, strings.ToLower(e.Code), metrics.CauseToolCall)
	if run.EndedAt > 0 {
		s.runsDur.Observe(float64(run.EndedAt-run.StartedAt)/1000, run.AgentID, store.RunFailed)
	}
}
