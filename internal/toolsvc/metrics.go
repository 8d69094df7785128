package toolsvc

import (
	"encoding/json"
	"strings"

	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// countResult counts a call's final state (committed): every final state
// of a call is a tool_result, whichever path got there — a step, the
// sweeper, or a run's end cascading in the run manager's transaction —
// and it is counted only once committed.
func (s *Service) countResult(r *toolResult) {
	code := ""
	if r.Error != nil {
		code = r.Error.Code
	}
	s.calls.Inc(r.ToolName, r.State, code)
	s.duration.Observe(float64(r.DurationMS)/1000, r.ToolName, r.State)
	if code == "client_offline" {
		s.offline.Inc(r.ToolName)
	}
}

// countApproval counts an approval's outcome from its committed
// approval_decision.
func (s *Service) countApproval(payload []byte) {
	var p struct {
		ToolName string `json:"tool_name"`
		Decision string `json:"decision"`
		WaitedMS int64  `json:"waited_ms"`
	}
	if json.Unmarshal(payload, &p) == nil {
		s.waited.Observe(float64(p.WaitedMS)/1000, p.ToolName, p.Decision)
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
