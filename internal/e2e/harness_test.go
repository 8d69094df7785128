// Package e2e drives the real agentplane binary: a server process on SQLite
// or PostgreSQL, real agent processes (Python and Go SDK), real HTTP agents
// for failure modes, and real WebSocket clients.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/testdb"
)

const (
	adminKey = "test-admin-key-0123456789"
	apiKeys  = "alice:alice-key,bob:bob-key"
)

var (
	binDir   string
	repoRoot string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "agentplane-e2e-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	for pkg, name := range map[string]string{"./cmd/agentplane": "agentplane", "./examples/go/echo": "echo-agent"} {
		cmd := exec.Command("go", "build", "-race", "-o", filepath.Join(binDir, name), pkg)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// server is one agentplane process.
type server struct {
	t      *testing.T
	env    []string // extra environment, after the defaults
	cmd    *exec.Cmd
	URL    string
	WS     string
	dsn    string
	args   []string
	mu     sync.Mutex
	out    bytes.Buffer // stdout+stderr, for failures
	exited chan struct{}
}

var listenRE = regexp.MustCompile(`agentplane listening on (http://\S+)`)

// startServer starts agentplane on dsn with test keys and loopback agents
// allowed. extra flags are appended.
func startServer(t *testing.T, dsn string, extra ...string) *server {
	t.Helper()
	return startServerEnv(t, dsn, nil, extra...)
}

// startServerEnv is startServer with extra environment variables.
func startServerEnv(t *testing.T, dsn string, env []string, extra ...string) *server {
	t.Helper()
	s := &server{t: t, dsn: dsn, args: extra, env: env}
	s.start()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *server) start() {
	t := s.t
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--instance-id", "e2e-" + t.Name()}, s.args...)
	cmd := exec.Command(filepath.Join(binDir, "agentplane"), args...)
	cmd.Env = append(os.Environ(),
		"AGENTPLANE_DB="+s.dsn, "AGENTPLANE_ADMIN_KEY="+adminKey, "AGENTPLANE_API_KEYS="+apiKeys,
		"AGENTPLANE_ENDPOINT_ALLOWLIST=127.0.0.1/32", "AGENTPLANE_LLM_BASE_URL=", "AGENTPLANE_CONFIG=")
	cmd.Env = append(cmd.Env, s.env...)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = &lockedWriter{s: s}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.out.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				found <- m[1]
			}
		}
	}()
	go func() { cmd.Wait(); close(s.exited) }()
	select {
	case u := <-found:
		s.URL = u
		s.WS = "ws" + strings.TrimPrefix(u, "http") + "/v1/ws"
	case <-s.exited:
		t.Fatalf("server exited at start:\n%s", s.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not start:\n%s", s.output())
	}
}

type lockedWriter struct{ s *server }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.out.Write(p)
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("server did not stop on SIGTERM:\n%s", s.output())
	}
	s.checkRaces()
}

// checkRaces fails the test when the server (built with -race) reported a
// data race: the detector only prints, and the exit code of a process
// stopped by a signal is not looked at.
func (s *server) checkRaces() {
	if out := s.output(); strings.Contains(out, "WARNING: DATA RACE") {
		s.t.Errorf("the server reported a data race:\n%s", out)
	}
}

// kill ends the process at once, as a crash would.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// restart starts a new process on the same database and instance id.
func (s *server) restart() {
	s.start()
}

// call does an HTTP request and decodes a JSON answer.
func (s *server) call(method, path, key string, body any, hdr ...string) (int, map[string]any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		if raw, ok := body.(string); ok {
			rd = strings.NewReader(raw)
		} else {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
	}
	req, _ := http.NewRequest(method, s.URL+path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && json.Unmarshal(raw, &out) != nil {
		s.t.Fatalf("%s %s: %d non-JSON body %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// register registers an agent (that may call the linked agents) and
// returns its key.
func (s *server) register(agentID, endpoint string, linked ...string) string {
	s.t.Helper()
	req := map[string]any{"agent_id": agentID, "endpoint": endpoint, "capabilities": []string{"chat"}}
	if len(linked) > 0 {
		req["linked_agents"] = linked
	}
	code, body := s.call("POST", "/v1/agents/register", adminKey, req)
	if code != http.StatusCreated && code != http.StatusOK {
		s.t.Fatalf("register %s: %d %v", agentID, code, body)
	}
	key, _ := body["agent_api_key"].(string)
	return key
}

// events fetches a session's or run's replay.
func (s *server) events(path string) []map[string]any {
	s.t.Helper()
	code, body := s.call("GET", path, adminKey, nil)
	if code != 200 {
		s.t.Fatalf("GET %s: %d %v", path, code, body)
	}
	var out []map[string]any
	for _, e := range body["events"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// client is a WebSocket client of the ingress protocol.
type client struct {
	t    *testing.T
	conn *websocket.Conn
}

// dial connects and says hello as user.
func dial(t *testing.T, s *server, user, key string) *client {
	t.Helper()
	c := dialRaw(t, s)
	c.send(map[string]any{"type": "hello", "user_id": user, "api_key": key})
	if m := c.next(); m["type"] != "ready" {
		t.Fatalf("hello answered %v", m)
	}
	return c
}

func dialRaw(t *testing.T, s *server) *client {
	t.Helper()
	conn, _, err := websocket.DefaultDialer.Dial(s.WS, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", s.WS, err)
	}
	c := &client{t: t, conn: conn}
	t.Cleanup(func() { conn.Close() })
	return c
}

func (c *client) send(m any) {
	c.t.Helper()
	if err := c.conn.WriteJSON(m); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	if err := c.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// next reads one message (30 s at most).
func (c *client) next() map[string]any {
	c.t.Helper()
	m, err := c.read(30 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return m
}

func (c *client) read(timeout time.Duration) (map[string]any, error) {
	c.conn.SetReadDeadline(time.Now().Add(timeout))
	_, data, err := c.conn.ReadMessage()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("non-JSON message %q", data)
	}
	return m, nil
}

// untilEnd reads messages until the run ends (done, input_required, an
// error with a seq, or the platform's CANCELLED state) and returns all of
// them.
func (c *client) untilEnd() []map[string]any {
	c.t.Helper()
	var got []map[string]any
	for {
		m := c.next()
		got = append(got, m)
		if isEnd(m) {
			return got
		}
	}
}

func isEnd(m map[string]any) bool {
	switch m["type"] {
	case "done", "input_required":
		return true
	case "error":
		return m["seq"] != nil
	case "state":
		return m["state"] == "CANCELLED" && m["source"] != "agent"
	}
	return false
}

func seqOf(m map[string]any) int64 {
	f, _ := m["seq"].(float64)
	return int64(f)
}

// assertIncreasingSeqs checks every logged message has session_id, seq and
// event_id, and seqs strictly increase.
func assertIncreasingSeqs(t *testing.T, msgs []map[string]any) {
	t.Helper()
	last := int64(0)
	for _, m := range msgs {
		if m["session_id"] == nil || m["event_id"] == nil || m["seq"] == nil {
			t.Fatalf("logged message without session_id/seq/event_id: %v", m)
		}
		if s := seqOf(m); s <= last {
			t.Fatalf("seq %d after %d: %v", s, last, m)
		} else {
			last = s
		}
	}
}

// text joins the deltas.
func text(msgs []map[string]any) string {
	var b strings.Builder
	for _, m := range msgs {
		if m["type"] == "delta" {
			b.WriteString(m["text"].(string))
		}
	}
	return b.String()
}

// eachStore runs fn on a fresh SQLite file and a fresh PostgreSQL schema.
func eachStore(t *testing.T, fn func(t *testing.T, dsn string)) {
	testdb.Each(t, func(t *testing.T, dialect string) { fn(t, testdb.DSN(t, dialect)) })
}

// pythonAgent starts the Python SDK example agent, which registers itself
// with s as agentID, and waits until it is registered.
func pythonAgent(t *testing.T, s *server, agentID string) {
	t.Helper()
	cmd := exec.Command("python3", "-u", filepath.Join(repoRoot, "examples", "python", "echo_agent.py"), "--port", "0", "--agent-id", agentID)
	startAgentProcess(t, s, cmd, agentID)
}

// goAgent starts the Go SDK example agent the same way.
func goAgent(t *testing.T, s *server, agentID string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "echo-agent"), "--port", "0", "--agent-id", agentID)
	startAgentProcess(t, s, cmd, agentID)
}

func startAgentProcess(t *testing.T, s *server, cmd *exec.Cmd, agentID string) {
	t.Helper()
	cmd.Env = append(os.Environ(), "AGENTPLANE_URL="+s.URL, "AGENTPLANE_ADMIN_KEY="+adminKey, "AGENTPLANE_AGENT_KEY=")
	var out bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout = &syncWriter{w: &out, mu: &mu}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := s.call("GET", "/v1/agents/"+agentID, adminKey, nil); code == 200 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("agent %s did not register:\n%s", agentID, out.String())
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func testdbDSN(t *testing.T, dialect string) string { return testdb.DSN(t, dialect) }

// invokeUntilDeltas starts a run of agentID in a new session and reads
// until n deltas arrived; it returns run_started and the last message read.
func (c *client) invokeUntilDeltas(agentID string, n int) (started, last map[string]any) {
	c.t.Helper()
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": agentID, "message": map[string]any{"role": "user", "content": "go"}})
	started = c.next()
	for deltas := 0; deltas < n; {
		if last = c.next(); last["type"] == "delta" {
			deltas++
		}
	}
	return started, last
}
