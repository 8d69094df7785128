package e2e

// Python SDK agents against the real platform: what the SDK refuses to send
// on a handler's behalf because the platform would fail the run on it
// (docs/API.md "Agent → platform").

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonSDKEmptyStateRefused: the platform fails a run whose agent sends
// a state event without a state (agent_protocol_error). The SDK refuses
// State("") where the handler makes it (ValueError), so a handler that
// catches it finishes its run DONE.
func TestPythonSDKEmptyStateRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		cmd := exec.Command("env", "PYTHONPATH="+filepath.Join(repoRoot, "sdk", "python"), "python3", "-u",
			filepath.Join(repoRoot, "internal", "e2e", "testdata", "python_sdk_calls_agent.py"), "--agent-id", "pycalls")
		startAgentProcess(t, s, cmd, "pycalls")
		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "pycalls", "message": map[string]any{"role": "user", "content": "empty_state"}})
		msgs := c.untilEnd()
		if last := msgs[len(msgs)-1]; last["type"] != "done" || text(msgs) != "refused" {
			t.Fatalf("a handler catching State(\"\")'s refusal: %v", msgs)
		}
		s.checkRaces()
	})
}
