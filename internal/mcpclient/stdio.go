package mcpclient

import (
	"bytes"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
)

// inheritedEnv are the only variables of the platform's environment a stdio
// server gets (besides its spec's env): enough for a program to run, and
// none of the platform's secrets (admin key, database URL, LLM key).
var inheritedEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// maxStderrLine bounds one logged line of a server's stderr.
const maxStderrLine = 4 << 10

// command builds the process of a stdio server. Its stderr goes to the
// platform's log, a line per record, tagged with the server's name. It
// runs in a process group of its own, so that done — called once the
// session has closed (which ends the process: stdin closed, SIGTERM, then
// SIGKILL) — can also end what it started (npx and the like run the
// server as a child).
func (c *conn) command() (*exec.Cmd, func()) {
	cmd := exec.Command(c.spec.Command, c.spec.Args...)
	env := map[string]string{}
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for k, v := range c.spec.Env {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cmd.Env = make([]string, 0, len(keys))
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild keeping stderr open must not hold Wait (and so the
	// session's Close) forever.
	cmd.WaitDelay = c.m.opts.StopGrace
	w := &stderrLog{c: c}
	cmd.Stderr = w
	var once sync.Once
	return cmd, func() {
		once.Do(func() {
			if cmd.Process != nil {
				// The group of the server's process: whatever it left behind.
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			w.flush()
		})
	}
}

// stderrLog writes a stdio server's stderr to the platform's log, line by
// line.
type stderrLog struct {
	c   *conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			if w.buf.Len() > maxStderrLine {
				w.emit(w.buf.Next(maxStderrLine))
			}
			return len(p), nil
		}
		w.emit(w.buf.Next(i + 1))
	}
}

func (w *stderrLog) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 0 {
		w.emit(w.buf.Next(w.buf.Len()))
	}
}

func (w *stderrLog) emit(line []byte) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) > maxStderrLine {
		line = line[:maxStderrLine]
	}
	if len(line) > 0 {
		w.c.log.Info("MCP server stderr", "line", string(line))
	}
}
