// Package benchproc is the process plumbing the benchmark commands share:
// build and start the real agentplane binary, fresh PostgreSQL schemas,
// /proc readings and the metrics endpoint.
package benchproc

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
	AdminKey = "bench-admin-key-0123456789"
	UserID   = "bench"
	UserKey  = "bench-user-key"
)

// DefaultPostgres matches internal/testdb.
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func PostgresURL() string {
	if u := os.Getenv("AGENTPLANE_TEST_POSTGRES"); u != "" {
		return u
	}
	return DefaultPostgres
}

// RepoRoot is the module directory (the one holding go.mod).
func RepoRoot() (string, error) {
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

// BuildPlatform builds cmd/agentplane (no race detector: this is what ships).
func BuildPlatform(dir string) (string, error) {
	root, err := RepoRoot()
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
type Proc struct {
	name   string
	cmd    *exec.Cmd
	URL    string // http://host:port
	exited chan struct{}

	mu  sync.Mutex
	out bytes.Buffer // tail of stdout+stderr, for failures
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// StartProc starts bin with args and env and waits for its listening line.
// onStderr, when set, sees every stderr line (GODEBUG=gctrace=1 output).
func StartProc(name, bin string, args, env []string, onStderr func(string)) (*Proc, error) {
	p := &Proc{name: name, exited: make(chan struct{})}
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
		return nil, fmt.Errorf("%s exited at start:\n%s", name, p.Tail())
	case <-time.After(60 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("%s did not start:\n%s", name, p.Tail())
	}
}

func (p *Proc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out.Len() > 64<<10 {
		b := append([]byte(nil), p.out.Bytes()[p.out.Len()-32<<10:]...)
		p.out.Reset()
		p.out.Write(b)
	}
	p.out.WriteString(line + "\n")
}

func (p *Proc) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// wsURL is the WebSocket address for path.
func (p *Proc) WSURL(path string) string { return "ws" + strings.TrimPrefix(p.URL, "http") + path }

// stop asks for a graceful exit (SIGTERM) and waits; after timeout it kills.
func (p *Proc) Stop(timeout time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.Kill()
	}
}

// kill ends the process at once and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// StartPlatform starts `agentplane serve` on dsn with the bench keys and
// loopback endpoints (agent and tool servers) allowed.
func StartPlatform(bin, dsn string, extraEnv []string, onStderr func(string)) (*Proc, error) {
	env := append([]string{
		"AGENTPLANE_DB=" + dsn, "AGENTPLANE_ADMIN_KEY=" + AdminKey,
		"AGENTPLANE_API_KEYS=" + UserID + ":" + UserKey,
		"AGENTPLANE_ENDPOINT_ALLOWLIST=127.0.0.1/32", "AGENTPLANE_LLM_BASE_URL=", "AGENTPLANE_CONFIG=",
		// The benchmarks open 10,000 connections of one user and 5,000
		// unauthenticated keep-alive ones: above the default caps, which
		// protect a production server, not a measurement.
		"AGENTPLANE_MAX_CONNECTIONS=0", "AGENTPLANE_MAX_UNAUTHENTICATED_CONNECTIONS=0", "AGENTPLANE_MAX_WS_PER_USER=0",
	}, extraEnv...)
	return StartProc("agentplane", bin, []string{"serve", "--addr", "127.0.0.1:0", "--instance-id", "bench-" + ids.New("i")}, env, onStderr)
}

// SelfProc re-executes this tool with a subcommand (a baseline server is a
// process of its own, like the platform).
func SelfProc(name string, args, env []string, onStderr func(string)) (*Proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return StartProc(name, exe, args, env, onStderr)
}

// PostgresSchema creates a fresh schema on the PostgreSQL server and returns
// a DSN whose search_path points at it, and a function that drops it.
func PostgresSchema(base string) (string, func(), error) {
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

// ProcStatusKB reads a "Name:   N kB" field of /proc/PID/status.
func ProcStatusKB(pid int, field string) (int64, error) {
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

// ProcCPU is the user+system CPU time a process has used.
func ProcCPU(pid int) time.Duration {
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

// MachineBusy is the CPU time all processes have used, from /proc/stat.
func MachineBusy() time.Duration {
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

// LoadAvg is the first field of /proc/loadavg.
func LoadAvg() string {
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

// RaiseNoFile lifts the soft fd limit to the hard one (children inherit it).
func RaiseNoFile() (uint64, error) {
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

// ScrapeMetrics reads the platform's GET /metrics (admin key) into
// name{labels} → value; nil when unavailable.
func ScrapeMetrics(base string) map[string]float64 {
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+AdminKey)
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
