package e2e

// The operator commands of issue 11, run as the real binary against a real
// server (the demo: an agent, priced LLM calls, a tool that needs approval).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// runCLI runs `agentplane args…` against base with the admin key in the
// environment and returns its output and exit code.
func runCLI(t *testing.T, base, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "agentplane"), args...)
	cmd.Env = append(os.Environ(), "AGENTPLANE_URL="+base, "AGENTPLANE_ADMIN_KEY="+adminKey, "AGENTPLANE_KEY=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// mustCLI is runCLI that fails the test unless the command succeeds.
func mustCLI(t *testing.T, base, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, base, stdin, args...)
	if code != 0 {
		t.Fatalf("agentplane %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestCLIOperatorCommands(t *testing.T) {
	s := startDemo(t)

	// agents register | list
	out := mustCLI(t, s.URL, "", "agents", "register", "--id", "cli-agent", "--endpoint", "http://127.0.0.1:9/", "--capabilities", "chat", "--linked", "demo")
	if !strings.Contains(out, "registered agent cli-agent") || !regexp.MustCompile(`agent key \(shown once\): apk_\S+`).MatchString(out) {
		t.Fatalf("register printed %q", out)
	}
	if out := mustCLI(t, s.URL, "", "agents", "register", "cli-agent", "--endpoint", "http://127.0.0.1:9/", "--name", "CLI", "--linked", "demo"); !strings.Contains(out, "updated agent cli-agent") || strings.Contains(out, "apk_") {
		t.Fatalf("re-register printed %q", out)
	}
	out = mustCLI(t, s.URL, "", "agents", "list")
	if !regexp.MustCompile(`(?m)^cli-agent\s+\S+\s+http://127\.0\.0\.1:9\s+demo\s`).MatchString(out) || !regexp.MustCompile(`(?m)^demo\s`).MatchString(out) {
		t.Fatalf("agents list:\n%s", out)
	}
	var agents []map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, s.URL, "", "agents", "list", "--json")), &agents); err != nil ||
		!slices.ContainsFunc(agents, func(a map[string]any) bool { return a["agent_id"] == "cli-agent" }) ||
		!slices.ContainsFunc(agents, func(a map[string]any) bool { return a["agent_id"] == "demo" }) {
		t.Fatalf("agents list --json: %v %v", agents, err)
	}
	if _, errOut, code := runCLI(t, s.URL, "", "agents", "register", "--id", "x"); code != 2 || !strings.Contains(errOut, "usage:") {
		t.Fatalf("register without an endpoint: exit %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, s.URL, "", "agents", "list", "--key", "wrong"); code != 1 || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("a wrong key: exit %d %q", code, errOut)
	}

	// tools put (YAML file, JSON on stdin) | list
	yamlFile := filepath.Join(t.TempDir(), "tools.yaml")
	os.WriteFile(yamlFile, []byte(`tools:
  - tool_name: cli.lookup
    kind: client
    description: looks something up
    parameters:
      type: object
      properties:
        q: {type: string}
  - tool_name: cli.pay
    kind: client
    policy:
      decision: allow
      rules:
        - {name: big, when: "args.amount > 10", decision: require_approval}
`), 0o644)
	if out := mustCLI(t, s.URL, "", "tools", "put", yamlFile); !strings.Contains(out, "put tool cli.lookup") || !strings.Contains(out, "put tool cli.pay") {
		t.Fatalf("tools put yaml: %q", out)
	}
	if out := mustCLI(t, s.URL, `{"kind":"client","description":"from stdin"}`, "tools", "put", "-", "--name", "cli.stdin"); !strings.Contains(out, "put tool cli.stdin") {
		t.Fatalf("tools put stdin: %q", out)
	}
	if _, errOut, code := runCLI(t, s.URL, `{"kind":"client","polcy":{}}`, "tools", "put", "-", "--name", "cli.bad"); code != 1 || !strings.Contains(errOut, "invalid_json") {
		t.Fatalf("a misspelt field: exit %d %q", code, errOut)
	}
	out = mustCLI(t, s.URL, "", "tools", "list")
	for _, want := range []string{`(?m)^cli\.lookup\s+client\s+allow\s+0\s`, `(?m)^cli\.pay\s+client\s+allow\s+1\s`, `(?m)^cli\.stdin\s+client\s`, `(?m)^demo\.transfer\s+server\s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("tools list lacks %s:\n%s", want, out)
		}
	}

	// A session to look at: alice asks for a transfer that needs approval.
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Send 250 to Bob"}})
	ar := c.readUntilAll("approval_required", isType("approval_required"))
	sid, runID := sv(ar[0], "session_id"), sv(ar[0], "run_id")
	apID := sv(find(t, ar, "approval", isType("approval_required")), "approval_id")

	// sessions tail follows it from the start, through a proxy that drops.
	proxy := newCutProxy(t, strings.TrimPrefix(s.URL, "http://"))
	tail := startTail(t, proxy.URL, sid)
	tail.waitFor(t, "the approval in the tail", "approval_created")

	// approvals list | decide
	out = mustCLI(t, s.URL, "", "approvals", "list")
	if !regexp.MustCompile(`(?m)^` + apID + `\s+PENDING\s+demo\.transfer\s`).MatchString(out) {
		t.Fatalf("approvals list:\n%s", out)
	}
	if out := mustCLI(t, s.URL, "", "approvals", "list", "--key", "bob-key", "--status", "all"); strings.Contains(out, apID) {
		t.Fatalf("bob sees alice's approval:\n%s", out)
	}
	proxy.cut() // the tail loses its connection while the run goes on
	out = mustCLI(t, s.URL, "", "approvals", "decide", apID, "approve", "--reason", "fine", "--by", "ops")
	if !strings.Contains(out, "approval "+apID+" is APPROVED") {
		t.Fatalf("decide: %q", out)
	}
	if msgs := c.untilEnd(); msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("the approved run ended %v", msgs[len(msgs)-1])
	}
	time.Sleep(700 * time.Millisecond) // a reconnect attempt fails while the network is down
	proxy.restore()
	tail.waitFor(t, "the run's end in the tail after the reconnect", "run_done")
	tail.stop()
	if !strings.Contains(tail.stderr(), "reconnecting after seq") {
		t.Errorf("tail did not say it reconnected: %q", tail.stderr())
	}
	// Every event of the session, once, in order.
	all := s.events("/v1/sessions/" + sid + "/events")
	seqs := tail.seqs(t)
	if len(seqs) != len(all) {
		t.Fatalf("tail printed %d events, the session has %d:\n%s", len(seqs), len(all), tail.stdout())
	}
	for i, n := range seqs {
		if n != int64(i+1) {
			t.Fatalf("tail line %d has seq %d:\n%s", i, n, tail.stdout())
		}
	}
	if !regexp.MustCompile(`(?m)approval_decision\s+`+apID+` approved by=ops`).MatchString(tail.stdout()) ||
		!regexp.MustCompile(`(?m)llm_call_done\s+model=demo-llm prompt=\d+ completion=\d+`).MatchString(tail.stdout()) {
		t.Errorf("tail lines lack the decision or the LLM call:\n%s", tail.stdout())
	}

	// sessions list | runs list | runs tree
	out = mustCLI(t, s.URL, "", "sessions", "list", "--user", "alice")
	if !regexp.MustCompile(`(?m)^` + sid + `\s+alice\s+ended\s+1\s+\d+\s+demo\s`).MatchString(out) {
		t.Fatalf("sessions list:\n%s", out)
	}
	if out := mustCLI(t, s.URL, "", "sessions", "list", "--key", "bob-key"); strings.Contains(out, sid) {
		t.Fatalf("bob lists alice's session:\n%s", out)
	}
	var sessions []map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, s.URL, "", "sessions", "list", "--json", "--since", "1h")), &sessions); err != nil || len(sessions) != 1 || sessions[0]["session_id"] != sid {
		t.Fatalf("sessions list --json: %v %v", sessions, err)
	}
	out = mustCLI(t, s.URL, "", "runs", "list", "--session", sid)
	if !regexp.MustCompile(`(?m)^` + runID + `\s+demo\s+DONE\s+` + sid + `\s+-\s`).MatchString(out) {
		t.Fatalf("runs list:\n%s", out)
	}
	out = mustCLI(t, s.URL, "", "runs", "tree", runID)
	if !regexp.MustCompile(`(?m)^` + runID + `\s+demo\s+DONE\s`).MatchString(out) {
		t.Fatalf("runs tree:\n%s", out)
	}
	var tree map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, s.URL, "", "runs", "tree", runID, "--json")), &tree); err != nil || tree["run_id"] != runID || tree["status"] != "DONE" {
		t.Fatalf("runs tree --json: %v %v", tree, err)
	}
	if _, errOut, code := runCLI(t, s.URL, "", "runs", "tree", "run_missing"); code != 1 || !strings.Contains(errOut, "run_not_found") {
		t.Fatalf("tree of a missing run: exit %d %q", code, errOut)
	}
}

// tailProc is a running `agentplane sessions tail`.
type tailProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	errb bytes.Buffer
	done chan struct{}
}

func startTail(t *testing.T, base, sid string) *tailProc {
	t.Helper()
	p := &tailProc{done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, "agentplane"), "sessions", "tail", sid)
	p.cmd.Env = append(os.Environ(), "AGENTPLANE_URL="+base, "AGENTPLANE_ADMIN_KEY="+adminKey, "AGENTPLANE_KEY=")
	stdout, _ := p.cmd.StdoutPipe()
	p.cmd.Stderr = &syncWriter{w: &p.errb, mu: &p.mu}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *tailProc) stdout() string { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }
func (p *tailProc) stderr() string { p.mu.Lock(); defer p.mu.Unlock(); return p.errb.String() }

func (p *tailProc) waitFor(t *testing.T, what, substr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.stdout(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: tail printed\n%s\nstderr:\n%s", what, p.stdout(), p.stderr())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// stop interrupts the tail, which exits cleanly.
func (p *tailProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
	}
	p.cmd.Wait()
}

// seqs are the seqs of the printed lines, in order.
func (p *tailProc) seqs(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, line := range strings.Split(strings.TrimSpace(p.stdout()), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("tail line %q has no seq", line)
		}
		out = append(out, n)
	}
	return out
}
