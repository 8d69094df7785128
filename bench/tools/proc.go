package main

// Process plumbing shared by the modes: build and start the real binary,
// fresh PostgreSQL schemas, /proc readings. Adapted from bench/foundation
// (a main package cannot be imported).

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver for schema set-up

	"github.com/agentplane/agentplane/internal/ids"
)

const (
	adminKey = "bench-admin-key-0123456789"
	userID   = "bench"
	userKey  = "bench-user-key"
	agentID  = "bench-tools-agent"
)

// defaultPostgres matches internal/testdb.
const defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func postgresURL() string {
	if u := os.Getenv("AGENTPLANE_TEST_POSTGRES"); u != "" {
		return u
	}
	return defaultPostgres
}

// repoRoot is the module directory (the one holding go.mod).
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run from inside the agentplane module")
	}
	return filepath.Dir(mod), nil
}

// buildPlatform builds cmd/agentplane (no race detector: this is what ships).
func buildPlatform(dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "agentplane")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/agentplane")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/agentplane: %v\n%s", err, out)
	}
	return bin, nil
}

// proc is a server subprocess that prints "... listening on http://ADDR".
type proc struct {
	name   string
	cmd    *exec.Cmd
	URL    string // http://host:port
	exited chan struct{}

	mu  sync.Mutex
	out bytes.Buffer // tail of stdout+stderr, for failures
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startProc starts bin with args and env and waits for its listening line.
// onStderr, when set, sees every stderr line (GODEBUG=gctrace=1 output).
func startProc(name, bin string, args, env []string, onStderr func(string)) (*proc, error) {
	p := &proc{name: name, exited: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd = cmd
	found := make(chan string, 1)
	var readers sync.WaitGroup
	scan := func(r io.Reader, each func(string)) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.keep(line)
			if each != nil {
				each(line)
			}
		}
	}
	readers.Add(2)
	go scan(stdout, func(line string) {
		if m := listenRE.FindStringSubmatch(line); m != nil {
			select {
			case found <- m[1]:
			default:
			}
		}
	})
	go scan(stderr, onStderr)
	go func() { readers.Wait(); cmd.Wait(); close(p.exited) }()
	select {
	case u := <-found:
		p.URL = u
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited at start:\n%s", name, p.tail())
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("%s did not start:\n%s", name, p.tail())
	}
}

func (p *proc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out.Len() > 64<<10 {
		b := append([]byte(nil), p.out.Bytes()[p.out.Len()-32<<10:]...)
		p.out.Reset()
		p.out.Write(b)
	}
	p.out.WriteString(line + "\n")
}

func (p *proc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// wsURL is the WebSocket address for path.
func (p *proc) wsURL(path string) string { return "ws" + strings.TrimPrefix(p.URL, "http") + path }

// stop asks for a graceful exit (SIGTERM) and waits; after timeout it kills.
func (p *proc) stop(timeout time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
	}
}

// kill ends the process at once and waits for it.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// startPlatform starts `agentplane serve` on dsn with the bench keys and
// loopback endpoints (agent and tool servers) allowed.
func startPlatform(bin, dsn string, extraEnv []string, onStderr func(string)) (*proc, error) {
	env := append([]string{
		"AGENTPLANE_DB=" + dsn, "AGENTPLANE_ADMIN_KEY=" + adminKey,
		"AGENTPLANE_API_KEYS=" + userID + ":" + userKey,
		"AGENTPLANE_ENDPOINT_ALLOWLIST=127.0.0.1/32", "AGENTPLANE_LLM_BASE_URL=", "AGENTPLANE_CONFIG=",
	}, extraEnv...)
	return startProc("agentplane", bin, []string{"serve", "--addr", "127.0.0.1:0", "--instance-id", "bench-" + ids.New("i")}, env, onStderr)
}

// selfProc re-executes this tool with a subcommand (a baseline server is a
// process of its own, like the platform).
func selfProc(name string, args, env []string, onStderr func(string)) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startProc(name, exe, args, env, onStderr)
}

// postgresSchema creates a fresh schema on the PostgreSQL server and returns
// a DSN whose search_path points at it, and a function that drops it.
func postgresSchema(base string) (string, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return "", nil, fmt.Errorf("PostgreSQL at %s (set AGENTPLANE_TEST_POSTGRES): %w", base, err)
	}
	schema := "benchtools" + strings.ReplaceAll(ids.New("s"), "_", "")
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// procStatusKB reads a "Name:   N kB" field of /proc/PID/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// procThreads is the Threads: field of /proc/PID/status.
func procThreads(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n
		}
	}
	return 0
}

// procCPU is the user+system CPU time a process has used.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// machineBusy is the CPU time all processes have used, from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		busy += v
	}
	const clkTck = 100
	return time.Duration(busy) * time.Second / clkTck
}

// loadAvg is the first field of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// raiseNoFile lifts the soft fd limit to the hard one (children inherit it).
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	return lim.Cur, nil
}

// scrapeMetrics reads the platform's GET /metrics (admin key) into
// name{labels} → value; nil when unavailable.
func scrapeMetrics(base string) map[string]float64 {
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// cpuMeter measures the CPU used by the platform, this tool and everything
// else on the machine over an interval.
type cpuMeter struct {
	pid            int
	began          time.Time
	srv, self, all time.Duration
	load0          string
}

func startCPU(pid int) *cpuMeter {
	return &cpuMeter{pid: pid, began: time.Now(), srv: procCPU(pid), self: procCPU(os.Getpid()), all: machineBusy(), load0: loadAvg()}
}

// cpuUse is cores used over an interval.
type cpuUse struct {
	server, tool, others float64
	load                 string
	wall                 time.Duration
}

func (m *cpuMeter) stop() cpuUse {
	wall := time.Since(m.began)
	srv, self, all := procCPU(m.pid)-m.srv, procCPU(os.Getpid())-m.self, machineBusy()-m.all
	s := wall.Seconds()
	return cpuUse{server: srv.Seconds() / s, tool: self.Seconds() / s, others: (all - srv - self).Seconds() / s, load: m.load0 + "→" + loadAvg(), wall: wall}
}

func (c cpuUse) String() string {
	return fmt.Sprintf("CPU cores: server %.2f, bench %.2f, others %.2f (PostgreSQL included), load %s", c.server, c.tool, c.others, c.load)
}
