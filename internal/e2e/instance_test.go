package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/testdb"
)

// A second process with the instance id of a running one refuses to start
// and says which setting to change; the first one's runs go on (issue 8,
// item 12). Before, the second failed the first's live runs at start.
func TestSecondProcessWithTheSameInstanceIDRefusesToStart(t *testing.T) {
	dsn := testdb.DSN(t, "postgres")
	a := startServer(t, dsn, "--instance-id", "shared-id")
	ag := newScriptedAgent(t, modeStream, 60) // ~3 s of deltas
	a.register("slow", ag.URL)
	c := dial(t, a, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "slow", "message": map[string]any{"role": "user", "content": "go"}})
	started := c.next()
	if started["type"] != "run_started" {
		t.Fatalf("invoke: %v", started)
	}

	ctx := ctxTimeout(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "agentplane"), "serve", "--addr", "127.0.0.1:0", "--instance-id", "shared-id")
	cmd.Env = append(os.Environ(),
		"AGENTPLANE_DB="+dsn, "AGENTPLANE_ADMIN_KEY="+adminKey, "AGENTPLANE_API_KEYS="+apiKeys,
		"AGENTPLANE_ENDPOINT_ALLOWLIST=127.0.0.1/32", "AGENTPLANE_LLM_BASE_URL=", "AGENTPLANE_CONFIG=")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second process did not stop:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || strings.Contains(string(out), "agentplane listening") {
		t.Fatalf("a second process with a live instance id started (%v):\n%s", err, out)
	}
	if o := string(out); !strings.Contains(o, `"shared-id"`) || !strings.Contains(o, "AGENTPLANE_INSTANCE_ID") {
		t.Fatalf("the refusal does not say what to change:\n%s", out)
	}

	msgs := c.untilEnd()
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("the first process's run ended with %v", end)
	}
	if d := len(msgs) - 1; d != 60 {
		t.Fatalf("%d deltas, want 60", d)
	}
}
