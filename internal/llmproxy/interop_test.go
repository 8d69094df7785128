package llmproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/llmproxy"
)

// TestNodeOpenAIInterop runs tests/interop (the `openai` npm package) against
// a real proxy in front of the fake upstream. Outside CI it is skipped when
// node or tests/interop/node_modules is missing; in CI (CI=true) that is a
// failure, so the interop check cannot silently stop running.
func TestNodeOpenAIInterop(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "tests", "interop"))
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	node, err := exec.LookPath("node")
	if err != nil {
		missing = "node is not on PATH"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		missing = "tests/interop/node_modules/openai is missing (run `npm ci` in tests/interop)"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("interop tests cannot run in CI: %s", missing)
		}
		t.Skipf("skipping the openai npm interop tests: %s", missing)
	}

	up := newUpstream(t, fakellm.Options{})
	e := newEnv(t, singleUpstream(up))
	out := filepath.Join(t.TempDir(), "raw.json")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"AGENTPLANE_BASE_URL="+e.srv.URL+"/v1",
		"AGENTPLANE_AGENT_KEY="+agentKey,
		"AGENTPLANE_RUN_ID=run-1",
		"AGENTPLANE_SESSION_ID=sess-1",
		"AGENTPLANE_INTEROP_OUT="+out,
	)
	output, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", output)
	if err != nil {
		t.Fatalf("node --test failed: %v", err)
	}
	if bytes.Contains(output, []byte("# skipped ")) && !bytes.Contains(output, []byte("# skipped 0")) {
		t.Fatal("node skipped interop tests")
	}

	// What the npm client received is what the upstream sent, byte for byte.
	var raw map[string]string
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) < 2 {
		t.Fatalf("node recorded %d raw bodies", len(raw))
	}
	reqs := up.fake.Requests()
	for msg, body := range raw {
		found := false
		for _, r := range reqs {
			if bytes.Contains(r.Body, []byte(`"`+msg+`"`)) {
				found = true
				if string(r.Response) != body {
					t.Errorf("%q: node got\n%s\nupstream sent\n%s", msg, body, r.Response)
				}
			}
		}
		if !found {
			t.Errorf("upstream never saw %q", msg)
		}
	}

	// Every metered call was recorded, attributed and metered.
	var done int
	for _, ev := range e.rec.all() {
		d, ok := ev.Payload.(llmproxy.CallDone)
		if !ok {
			continue
		}
		done++
		if d.Outcome != "ok" || d.TotalTokens == 0 || d.Partial || ev.Caller.RunID != "run-1" {
			t.Errorf("recorded %+v for %+v", d, ev.Caller)
		}
		if d.Endpoint == "chat.completions" && d.Stream && !strings.Contains(d.Model, "fake") {
			t.Errorf("model = %q", d.Model)
		}
	}
	if done < 8 {
		t.Errorf("recorded %d llm_call_done events, want ≥ 8", done)
	}
}
