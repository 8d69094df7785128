package e2e

// The Python SDK's req.agents.invoke against the real binary (issue 9
// deliverable 6), on SQLite and PostgreSQL, with real child agents
// (testdata/chain_agent.py, form "sdk").

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/eventlog"
)

// childSSEEvents are the logged events of a child its caller's stream
// carries (internal/httpapi/invoke.go).
var childSSEEvents = map[string]bool{
	eventlog.TypeRunStarted: true, eventlog.TypeAgentStreamDelta: true, eventlog.TypeState: true, eventlog.TypeToolRequest: true,
	eventlog.TypeApprovalCreated: true, eventlog.TypeRunDone: true, eventlog.TypeRunFailed: true, eventlog.TypeRunCancelled: true,
}

// startChainAgentVia is startChainAgent with the agent's calls to the
// platform sent to platformURL (a proxy in front of s).
func startChainAgentVia(t *testing.T, s *server, platformURL, agentID string, links []string) {
	t.Helper()
	cmd := exec.Command("env", "AGENTPLANE_URL="+platformURL, "PYTHONPATH="+filepath.Join(repoRoot, "sdk", "python"), "python3", "-u",
		filepath.Join(repoRoot, "internal", "e2e", "testdata", "chain_agent.py"), "--agent-id", agentID, "--links", strings.Join(links, ","))
	startAgentProcess(t, s, cmd, agentID)
}

// TestMultiAgentPythonSDK: an agent calls others with req.agents.invoke.
// It iterates each child's events — exactly the child's own events of the
// log, each once, in order — and gets result() (status, output, usage,
// total_usage) and text(); a child that fails raises SubAgentError with its
// code (and, let escape, fails the caller with it); a refusal raises at
// invoke. The caller's connection to the platform is cut while its child
// waits for an approval: the SDK attaches again with the same idempotency
// key, skips what it had seen, and the platform started one child. The
// child sees its depth and parent.
func TestMultiAgentPythonSDK(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		te := newToolEndpoint(t)
		cfg := filepath.Join(t.TempDir(), "agentplane.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`
tools:
  - tool_name: chain.approve
    kind: server
    endpoint: %q
    policy: {decision: require_approval}
`, te.URL)), 0o600)
		s := startServerEnv(t, dsn, []string{"AGENTPLANE_CONFIG=" + cfg})
		u, _ := url.Parse(s.URL)
		proxy := newCutProxy(t, u.Host)
		probe := newToolProbe(t)
		rep := &reports{p: probe}
		startChainAgentVia(t, s, proxy.URL, "a", []string{"b"})
		startChainAgent(t, s, "b", nil, "")
		startChainAgent(t, s, "stranger", nil, "")

		r := probe.reportURL()
		ok := plan(r, step{"say": "B one"})
		fail := plan(r, step{"say": "trying"}, step{"fail": "boom"})
		approve := plan(r, step{"say": "waiting"}, step{"tool": "chain.approve", "args": map[string]any{"amount": 5}}, step{"say": "B approved"})
		aPlan := plan(r,
			step{"call": "b", "form": "sdk", "message": ok},
			step{"call": "b", "form": "sdk", "message": fail},
			step{"call": "stranger", "form": "sdk", "message": "hi"},
			step{"call": "b", "form": "sdk", "message": approve, "key": "k-approve"},
			step{"say": "A done"})

		c := dial(t, s, "alice", "alice-key")
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "a", "message": map[string]any{"role": "user", "content": aPlan}})
		var rootID, sid string
		var msgs []map[string]any
		for {
			m := c.next()
			msgs = append(msgs, m)
			if m["type"] == "run_started" && rootID == "" {
				rootID, sid = sv(m, "run_id"), sv(m, "session_id")
			}
			if m["type"] == "approval_required" {
				// The caller is following its child's stream now: cut it.
				proxy.cut()
				proxy.restore()
				c.send(map[string]any{"type": "approval_decision", "request_id": "ap", "run_id": m["run_id"], "approval_id": m["approval_id"], "decision": "approve"})
			}
			if isEnd(m) && sv(m, "run_id") == rootID {
				break
			}
		}
		if end := msgs[len(msgs)-1]; end["type"] != "done" {
			t.Fatalf("the root ended %v", end)
		}
		lines := deltaLines(msgs)
		want := []string{"B one", "error:boom:FAILED", "api_error:agent_not_linked", "waiting"}
		if len(lines) < len(want)+3 || !slices.Equal(lines[:len(want)], want) || lines[len(lines)-2] != "B approved" || lines[len(lines)-1] != "A done" {
			t.Fatalf("the root answered %q", lines)
		}

		evs := sessionEvents(t, s, sid)
		kids, _ := runOf(t, s, rootID)["children"].([]any)
		if len(kids) != 3 {
			t.Fatalf("children %v, want 3 (a refusal starts none, a re-attach no second)", kids)
		}
		calls := map[string]map[string]any{}
		for len(calls) < 3 {
			m := rep.until(t, "an sdk_call report", func(m map[string]any) bool { return m["event"] == "sdk_call" && calls[sv(m, "child")] == nil })
			calls[sv(m, "child")] = m
		}
		for i, k := range kids {
			child := k.(string)
			m := calls[child]
			if m == nil {
				t.Fatalf("no sdk_call report for child %s; reports %v", child, calls)
			}
			// What the SDK iterated is the child's own events in the log, once each.
			var logged []int64
			for _, e := range evs {
				if e.RunID == child && childSSEEvents[e.Type] {
					logged = append(logged, e.Seq)
				}
			}
			var got []int64
			var types []string
			for _, x := range m["events"].([]any) {
				e := x.(map[string]any)
				got = append(got, int64(num(e, "seq")))
				types = append(types, sv(e, "type"))
				if sv(e, "run_id") != child || sv(e, "parent_run_id") != rootID {
					t.Errorf("child %s: event %v", child, e)
				}
			}
			if !slices.Equal(got, logged) {
				t.Errorf("child %s: the SDK iterated seqs %v, the log holds %v", child, got, logged)
			}
			res := obj(m, "result")
			if sv(res, "run_id") != child || obj(res, "total_usage") == nil {
				t.Errorf("child %s: result %v", child, res)
			}
			switch i {
			case 0, 2:
				if types[0] != "run_started" || types[len(types)-1] != "done" || sv(res, "status") != "DONE" || !strings.HasSuffix(sv(res, "output"), "\n") {
					t.Errorf("child %s: types %v result %v", child, types, res)
				}
			case 1:
				if types[len(types)-1] != "error" || sv(res, "status") != "FAILED" || sv(obj(res, "error"), "code") != "boom" {
					t.Errorf("failed child %s: types %v result %v", child, types, res)
				}
			}
			if i == 2 {
				if num(m, "attaches") < 2 || !slices.Contains(types, "approval_required") || num(obj(res, "total_usage"), "tool_calls") != 1 {
					t.Errorf("the child followed through the cut: attaches %v, types %v, result %v", m["attaches"], types, res)
				}
			}
		}
		inv := rep.until(t, "b invoked", func(m map[string]any) bool { return m["agent"] == "b" && m["event"] == "invoked" })
		if num(inv, "depth") != 1 || sv(inv, "parent_run_id") != rootID {
			t.Errorf("the child saw depth %v, parent %v", inv["depth"], inv["parent_run_id"])
		}

		// A SubAgentError let escape fails the caller with the child's code.
		c.send(map[string]any{"type": "agent_invoke", "request_id": "r2", "session_id": sid, "agent_id": "a", "message": map[string]any{"role": "user",
			"content": plan(r, step{"call": "b", "form": "sdk", "message": fail, "raise": true})}})
		var end map[string]any
		for end == nil {
			if m := c.next(); isEnd(m) && m["parent_run_id"] == nil && sv(m, "run_id") != rootID {
				end = m
			}
		}
		if end["type"] != "error" || sv(end, "code") != "boom" {
			t.Errorf("the caller ended %v", end)
		}
		assertSettled(t, dsn)
	})
}
