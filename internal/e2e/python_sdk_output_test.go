package e2e

// Python SDK agents against the real binary: output the SDK must shape to
// fit the platform's agent protocol (docs/API.md "Platform → agent").

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// startPythonOutputAgent starts testdata/python_sdk_output_agent.py as agentID.
func startPythonOutputAgent(t *testing.T, s *server, agentID string) {
	t.Helper()
	cmd := exec.Command("env", "PYTHONPATH="+filepath.Join(repoRoot, "sdk", "python"), "python3", "-u",
		filepath.Join(repoRoot, "internal", "e2e", "testdata", "python_sdk_output_agent.py"), "--agent-id", agentID)
	startAgentProcess(t, s, cmd, agentID)
}

// runPythonOutput starts a run of agentID with content in a new session and reads
// it to its end.
func runPythonOutput(t *testing.T, s *server, agentID, content string) []map[string]any {
	t.Helper()
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r-" + content, "agent_id": agentID, "message": map[string]any{"role": "user", "content": content}})
	return c.untilEnd()
}

// TestPythonSDKLargeOutput: a handler's answer may be longer than one SSE
// event may carry (1 MiB) and still within the run's output bound (8 MiB):
// the SDK sends it in several deltas, and the run ends DONE with every
// byte of it. An error whose message is that long still fails the run with
// the handler's own code (the platform keeps the message's first 4 KiB),
// not agent_protocol_error.
func TestPythonSDKLargeOutput(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		startPythonOutputAgent(t, s, "pyout")

		msgs := runPythonOutput(t, s, "pyout", "big")
		last := msgs[len(msgs)-1]
		want := strings.Repeat("héllo wörld ✓ 0123456789\n", 56000)
		if last["type"] != "done" {
			t.Fatalf("a 1.5 MiB answer ended the run with %v", last)
		}
		if got := text(msgs); got != want {
			t.Fatalf("answer: %d bytes, want %d", len(got), len(want))
		}

		msgs = runPythonOutput(t, s, "pyout", "big_error")
		last = msgs[len(msgs)-1]
		if last["type"] != "error" || last["code"] != "big_error_code" || !strings.HasPrefix(sv(last, "message"), "zzzz") {
			t.Fatalf("an error with a 2 MiB message ended the run with %.300v", last)
		}
		s.checkRaces()
	})
}

// TestPythonSDKGeneratorReturn: a generator handler that ends with `return
// agentplane.InputRequired(...)` (README: "yielded, returned or raised")
// asks the user: the run ends INPUT_REQUIRED with its question, not DONE
// with the question lost.
func TestPythonSDKGeneratorReturn(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		startPythonOutputAgent(t, s, "pyout")
		msgs := runPythonOutput(t, s, "pyout", "gen_return")
		last := msgs[len(msgs)-1]
		if last["type"] != "input_required" || last["question"] != "Which one?" || text(msgs) != "Let me see. " {
			t.Fatalf("a generator returning InputRequired: %v", msgs)
		}
		code, run := s.call("GET", "/v1/runs/"+sv(msgs[0], "run_id"), adminKey, nil)
		if code != 200 || run["status"] != "INPUT_REQUIRED" || run["question"] != "Which one?" {
			t.Fatalf("run %d %v", code, run)
		}
		s.checkRaces()
	})
}
