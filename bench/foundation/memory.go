package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

func memoryMain(args []string) error {
	fs := flag.NewFlagSet("memory", flag.ExitOnError)
	conns := fs.Int("conns", 10000, "idle WebSocket connections to open")
	settle := fs.Duration("settle", 30*time.Second, "idle time after the last connection before RSS is read (30 s spans one server ping interval)")
	parallel := fs.Int("dial-concurrency", 50, "connections being opened at once")
	storeKind := fs.String("store", "sqlite", "the platform's store: sqlite or postgres (idle connections do not touch it)")
	pg := fs.String("postgres", postgresURL(), "PostgreSQL server when -store postgres")
	fs.Parse(args)
	limit, err := raiseNoFile()
	if err != nil {
		return err
	}
	if limit < uint64(*conns)+200 {
		return fmt.Errorf("the fd limit is %d; %d connections need %d (raise `ulimit -n`)", limit, *conns, *conns+200)
	}
	dir, err := os.MkdirTemp("", "agentplane-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := buildPlatform(dir)
	if err != nil {
		return err
	}
	fmt.Printf("# memory per idle WebSocket connection — %d connections\n", *conns)
	fmt.Printf("# %s, %s/%s, %d CPUs; server and client are separate processes; RSS from /proc/PID/status, Go heap from GODEBUG=gctrace=1\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())

	// Baseline: a bare gorilla/websocket echo server.
	gcBase := &gcTracker{}
	echo, err := selfProc("echo-server", []string{"echo-server"}, []string{"GODEBUG=gctrace=1"}, gcBase.line)
	if err != nil {
		return err
	}
	b, err := measureIdle("bare gorilla/websocket echo server", echo, echo.WSURL("/ws"), "", *conns, *parallel, *settle, gcBase,
		map[string]any{"type": "hello", "user_id": userID, "api_key": userKey}, "")
	echo.Stop(10 * time.Second)
	if err != nil {
		return err
	}
	b.print()

	dsn := "sqlite:" + filepath.Join(dir, "bench.db")
	if *storeKind == "postgres" {
		var drop func()
		dsn, drop, err = postgresSchema(*pg)
		if err != nil {
			return err
		}
		defer drop()
	}
	gcPlat := &gcTracker{}
	p, err := startPlatform(bin, dsn, []string{"GODEBUG=gctrace=1"}, gcPlat.line)
	if err != nil {
		return err
	}
	r, err := measureIdle("agentplane ("+*storeKind+")", p, p.WSURL("/v1/ws"), p.URL, *conns, *parallel, *settle, gcPlat,
		map[string]any{"type": "hello", "user_id": userID, "api_key": userKey}, "ready")
	p.Stop(30 * time.Second)
	if err != nil {
		return err
	}
	r.print()

	fmt.Println("## summary (bytes per idle connection; ratio = agentplane ÷ bare echo server of this run)")
	fmt.Println()
	fmt.Println("| server | connections | RSS delta / conn | Go heap / conn (at last GC) | scannable stack / conn | ratio (RSS) | ≤ 30 KB |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, m := range []*memResult{b, r} {
		ratio, target := "—", "—"
		if m == r {
			ratio = fmt.Sprintf("%.2f×", r.perConn()/b.perConn())
			target = "met"
			if r.perConn() > 30*1024 {
				target = "MISSED"
			}
		}
		fmt.Printf("| %s | %d | %.0f B (%.1f KiB) | %s | %s | %s | %s |\n", m.name, m.opened, m.perConn(), m.perConn()/1024, m.heapPerConn(), m.stackPerConn(), ratio, target)
	}
	fmt.Println()
	return nil
}

// gcTracker follows a process's gctrace lines and remembers, for each GC,
// the live heap and stacks it reported and how many connections were open.
type gcTracker struct {
	mu     sync.Mutex
	open   func() int64
	events []gcEvent
}

type gcEvent struct {
	liveMB, stacksMB int64
	conns            int64
}

var gcRE = regexp.MustCompile(`^gc \d+ .* \d+->\d+->(\d+) MB, \d+ MB goal, (\d+) MB stacks`)

func (g *gcTracker) line(s string) {
	m := gcRE.FindStringSubmatch(s)
	if m == nil {
		return
	}
	live, _ := strconv.ParseInt(m[1], 10, 64)
	stacks, _ := strconv.ParseInt(m[2], 10, 64)
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	if g.open != nil {
		n = g.open()
	}
	g.events = append(g.events, gcEvent{live, stacks, n})
}

// around returns the last GC before connections were opened and the last
// one with the most connections open.
func (g *gcTracker) around() (before, loaded gcEvent, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.events {
		if e.conns == 0 {
			before = e
		} else if e.conns >= loaded.conns {
			loaded, ok = e, true
		}
	}
	return before, loaded, ok
}

type memResult struct {
	name               string
	opened             int64
	rssBefore, rssIdle int64 // kB
	rssPeak            int64
	gcBefore, gcLoaded gcEvent
	gcOK               bool
	openTime, settle   time.Duration
	serverConns        int64 // the platform's own count (GET /metrics), -1 if unknown
}

func (m *memResult) perConn() float64 {
	return float64(m.rssIdle-m.rssBefore) * 1024 / float64(m.opened)
}

func (m *memResult) heapPerConn() string {
	if !m.gcOK || m.gcLoaded.conns == 0 {
		return "no GC while loaded"
	}
	b := float64(m.gcLoaded.liveMB-m.gcBefore.liveMB) * (1 << 20) / float64(m.gcLoaded.conns)
	return fmt.Sprintf("%.0f B (%d MB live at %d conns)", b, m.gcLoaded.liveMB, m.gcLoaded.conns)
}

func (m *memResult) stackPerConn() string {
	if !m.gcOK || m.gcLoaded.conns == 0 {
		return "—"
	}
	b := float64(m.gcLoaded.stacksMB-m.gcBefore.stacksMB) * (1 << 20) / float64(m.gcLoaded.conns)
	return fmt.Sprintf("%.0f B", b)
}

func (m *memResult) print() {
	fmt.Printf("## %s\n", m.name)
	fmt.Printf("opened %d connections in %s; VmRSS %d KiB before, %d KiB after %s idle (peak %d KiB); %.0f B per connection\n",
		m.opened, m.openTime.Round(time.Millisecond), m.rssBefore, m.rssIdle, m.settle, m.rssPeak, m.perConn())
	if m.serverConns >= 0 {
		fmt.Printf("the server's own count (agentplane_ws_connections): %d\n", m.serverConns)
	}
	if m.gcOK {
		fmt.Printf("Go heap (gctrace): %d MB live before, %d MB live at the last GC with %d connections open; stacks %d → %d MB\n",
			m.gcBefore.liveMB, m.gcLoaded.liveMB, m.gcLoaded.conns, m.gcBefore.stacksMB, m.gcLoaded.stacksMB)
	}
	fmt.Println()
}

// measureIdle opens n connections to wsURL, each sending hello and reading
// one answer (of type want, if set), leaves them idle (a reader per
// connection answers the server's pings), and reads the server's RSS.
func measureIdle(name string, p *proc, wsURL, metricsURL string, n, parallel int, settle time.Duration, gc *gcTracker, hello map[string]any, want string) (*memResult, error) {
	res := &memResult{name: name, settle: settle}
	var opened atomic.Int64
	gc.mu.Lock()
	gc.open = opened.Load
	gc.mu.Unlock()
	time.Sleep(2 * time.Second)
	var err error
	if res.rssBefore, err = procStatusKB(p.Pid(), "VmRSS"); err != nil {
		return nil, err
	}
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
	conns := make([]*websocket.Conn, n)
	var firstErr error
	var errMu sync.Mutex
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := func() (*websocket.Conn, error) {
				c, _, err := dialer.Dial(wsURL, nil)
				if err != nil {
					return nil, err
				}
				if err := c.WriteJSON(hello); err != nil {
					c.Close()
					return nil, err
				}
				var m struct {
					Type string `json:"type"`
				}
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if err := c.ReadJSON(&m); err != nil || (want != "" && m.Type != want) {
					c.Close()
					return nil, fmt.Errorf("hello answered %q: %v", m.Type, err)
				}
				c.SetReadDeadline(time.Time{})
				return c, nil
			}()
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
				return
			}
			conns[i] = c
			opened.Add(1)
			go func() {
				for {
					if _, _, err := c.ReadMessage(); err != nil {
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	res.openTime = time.Since(began)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	res.opened = opened.Load()
	if firstErr != nil {
		return nil, fmt.Errorf("%s: %d of %d connections opened; first error: %w\n%s", name, res.opened, n, firstErr, p.Tail())
	}
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		rss, err := procStatusKB(p.Pid(), "VmRSS")
		if err != nil {
			return nil, err
		}
		res.rssIdle = rss
		res.rssPeak = max(res.rssPeak, rss)
	}
	res.gcBefore, res.gcLoaded, res.gcOK = gc.around()
	res.serverConns = -1
	if metricsURL != "" {
		if m := scrapeMetrics(metricsURL); m != nil {
			res.serverConns = int64(m["agentplane_ws_connections"])
		}
	}
	return res, nil
}

// echoServerMain is the memory baseline: the gorilla/websocket echo server
// as its README writes it (default Upgrader, one goroutine per connection).
func echoServerMain(args []string) error {
	fs := flag.NewFlagSet("echo-server", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	fs.Parse(args)
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(mt, msg); err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("echo-server listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
