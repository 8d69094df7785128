package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
)

// base is the one clock of this process: the agent stamps each delta with
// time.Since(base) just before writing it, and the client that receives it
// subtracts that from its own time.Since(base). Both are monotonic readings
// of the same clock, so wall-clock steps cannot skew them.
var base = time.Now()

type latencyConfig struct {
	runs     int
	rate     int
	duration time.Duration
	warmup   time.Duration
	stagger  time.Duration
	tail     time.Duration
}

func latencyMain(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	var cfg latencyConfig
	streams := fs.String("streams", "50,200,1000", "concurrent streaming runs (one WebSocket client and one session each); a comma list measures each count in turn")
	fs.IntVar(&cfg.rate, "rate", 20, "deltas per second each agent stream writes")
	fs.DurationVar(&cfg.duration, "duration", 20*time.Second, "measured window per target and round")
	rounds := fs.Int("rounds", 3, "rounds; each measures every target once, in turn, so machine noise hits all alike")
	fs.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "unmeasured streaming after all runs started")
	fs.DurationVar(&cfg.stagger, "stagger", time.Second, "runs start spread over this long (random phase, as real users)")
	fs.DurationVar(&cfg.tail, "tail", 2*time.Second, "streaming after the window before the platform is killed for the durability check")
	targets := fs.String("targets", "baseline,sqlite,postgres",
		"what to measure, in order: baseline (relay, no persistence), sqlite, postgres; sqlite=BIN or postgres=BIN measures another agentplane binary (A/B of a prototype)")
	pg := fs.String("postgres", postgresURL(), "PostgreSQL server (a fresh schema per round, dropped after); default $AGENTPLANE_TEST_POSTGRES")
	fs.StringVar(&serverLog, "server-log", "", "append the platform's stderr (its log) to this file")
	fs.Parse(args)
	var counts []int
	for _, f := range strings.Split(*streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("-streams: bad count %q", f)
		}
		counts = append(counts, n)
	}
	if _, err := raiseNoFile(); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "agentplane-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type target struct{ name, kind, bin string }
	var ts []target
	built := ""
	for _, t := range strings.Split(*targets, ",") {
		kind, bin, _ := strings.Cut(strings.TrimSpace(t), "=")
		name := "agentplane " + kind
		switch kind {
		case "baseline":
			name = "baseline relay (no persistence)"
		case "sqlite", "postgres":
			if bin != "" {
				name += " (" + bin + ")"
			} else {
				if built == "" {
					if built, err = buildPlatform(dir); err != nil {
						return err
					}
				}
				bin = built
			}
		default:
			return fmt.Errorf("unknown target %q", t)
		}
		ts = append(ts, target{name, kind, bin})
	}

	fmt.Printf("# delivery latency — agent SSE write → client WebSocket receive\n")
	fmt.Printf("# %s, %s/%s, %d CPUs, GOMAXPROCS=%d (load tool); streams %v × %d deltas/s; %d rounds × %s window per target, after %s warm-up\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		counts, cfg.rate, *rounds, cfg.duration, cfg.warmup)

	var all [][]*loadResult
	for _, n := range counts {
		cfg.runs = n
		fmt.Printf("# %d streams × %d deltas/s = %d deltas/s\n\n", n, cfg.rate, n*cfg.rate)
		pooled := make([]*loadResult, len(ts))
		for round := 1; round <= *rounds; round++ {
			for i, t := range ts {
				var r *loadResult
				var err error
				switch t.kind {
				case "baseline":
					r, err = measureBaseline(cfg)
				case "sqlite":
					r, err = measurePlatform(cfg, t.bin, "sqlite", "sqlite:"+filepath.Join(dir, fmt.Sprintf("bench-%d-%d-%d.db", n, round, i)))
				case "postgres":
					dsn, drop, perr := postgresSchema(*pg)
					if perr != nil {
						return perr
					}
					r, err = measurePlatform(cfg, t.bin, "postgres", dsn)
					drop()
				}
				if err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				r.name = fmt.Sprintf("%s, %d streams, round %d", t.name, n, round)
				r.print()
				if pooled[i] == nil {
					pooled[i] = &loadResult{name: t.name, streams: n, endings: map[string]int{}}
				}
				pooled[i].add(r)
			}
		}
		all = append(all, pooled)
	}
	printLatencySummary(all)
	return nil
}

// --- the agent: a real HTTP server speaking DESIGN §5 SSE ---

type benchAgent struct {
	srv      *http.Server
	URL      string
	interval time.Duration
	stop     chan struct{} // closed: every stream sends done
	window   *window
	sent     atomic.Int64 // deltas written inside the window
	streams  atomic.Int64
}

// window is the measured interval, in time since base. The agent and the
// clients read it from other goroutines, hence atomics.
type window struct{ start, end atomic.Int64 }

func newWindow() *window {
	w := &window{}
	w.set(1<<62, 1<<62)
	return w
}

func (w *window) set(start, end time.Duration) { w.start.Store(int64(start)); w.end.Store(int64(end)) }

func (w *window) in(t time.Duration) bool {
	return int64(t) >= w.start.Load() && int64(t) < w.end.Load()
}

func startAgent(rate int, w *window) (*benchAgent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &benchAgent{URL: "http://" + ln.Addr().String(), interval: time.Second / time.Duration(rate), stop: make(chan struct{}), window: w}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })
	mux.HandleFunc("POST /invoke", a.invoke)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

// invoke streams deltas at the configured rate until stop is closed (then
// done) or the platform closes the request. Each delta's text starts with
// the send time, taken just before the write and flush.
func (a *benchAgent) invoke(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	a.streams.Add(1)
	defer a.streams.Add(-1)
	// Random phase: 200 users do not type in lock-step.
	select {
	case <-time.After(rand.N(a.interval)):
	case <-r.Context().Done():
		return
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	buf := make([]byte, 0, 128)
	for i := 0; ; i++ {
		select {
		case <-a.stop:
			io.WriteString(w, "event: done\ndata: {\"usage\":{}}\n\n")
			rc.Flush()
			return
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		now := time.Since(base)
		buf = append(buf[:0], "event: delta\ndata: {\"text\":\""...)
		buf = strconv.AppendInt(buf, int64(now), 10)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, " lorem ipsum dolor\"}\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if a.window.in(now) {
			a.sent.Add(1)
		}
	}
}

func (a *benchAgent) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.srv.Shutdown(ctx)
	a.srv.Close()
}

// --- the clients ---

// inbound is the part of a platform→client message the bench reads.
type inbound struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"`
	EventID   string          `json:"event_id"`
	Text      string          `json:"text"`
	Code      string          `json:"code"`
	Message   json.RawMessage `json:"message"` // a string in errors, an object in run_started
}

type received struct {
	seq     int64
	eventID string
}

type clientResult struct {
	sessionID string
	lat       []time.Duration // deltas sent inside the window
	got       []received      // every logged message (platform only)
	seqErrors int             // a seq not above the previous one
	ended     string          // how the stream ended: done, error code, or read error
	startErr  error
}

func parseStamp(text string) (time.Duration, bool) {
	i := strings.IndexByte(text, ':')
	if i <= 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(text[:i], 10, 64)
	return time.Duration(n), err == nil
}

// runClient dials, says hello, invokes the agent once and reads until the
// stream ends. started is signalled once the invoke has been sent.
func runClient(wsURL string, w *window, logged bool, started func()) *clientResult {
	res := &clientResult{}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	conn, _, err := d.Dial(wsURL, nil)
	if err != nil {
		res.startErr = err
		started()
		return res
	}
	defer conn.Close()
	conn.WriteJSON(map[string]any{"type": "hello", "user_id": userID, "api_key": userKey})
	var m inbound
	if err := conn.ReadJSON(&m); err != nil || m.Type != "ready" {
		res.startErr = fmt.Errorf("hello answered %+v (%v)", m, err)
		started()
		return res
	}
	err = conn.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": agentID,
		"message": map[string]any{"role": "user", "content": "stream until told to stop"}})
	started()
	if err != nil {
		res.startErr = err
		return res
	}
	last := int64(0)
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			res.ended = "read: " + err.Error()
			return res
		}
		now := time.Since(base)
		m = inbound{}
		if err := json.Unmarshal(data, &m); err != nil {
			res.ended = "bad json: " + err.Error()
			return res
		}
		if m.Seq != 0 || m.EventID != "" {
			if m.Seq <= last {
				res.seqErrors++
			}
			last = m.Seq
			if logged {
				res.got = append(res.got, received{m.Seq, m.EventID})
			}
			if res.sessionID == "" {
				res.sessionID = m.SessionID
			}
		}
		switch m.Type {
		case "delta":
			if ts, ok := parseStamp(m.Text); ok && w.in(ts) {
				res.lat = append(res.lat, now-ts)
			}
		case "done":
			res.ended = "done"
			return res
		case "error":
			res.ended = "error " + m.Code + ": " + string(m.Message)
			if m.Seq != 0 || !logged {
				return res
			}
		}
	}
}

type loadResult struct {
	name      string
	streams   int
	lat       []time.Duration // sorted
	sent      int64           // deltas the agents wrote inside the window
	window    time.Duration
	serverCPU time.Duration // server process CPU time inside the window
	toolCPU   time.Duration // this process's CPU time inside the window
	otherCPU  time.Duration // every other process's CPU time inside the window
	load      string        // 1-minute load average at the window's start and end
	rssKB     int64         // server VmRSS at the end of the window
	seqErrors int
	startErrs []error
	endings   map[string]int
	durable   *durability // platform only
	committed int64       // events the platform committed in the window (its /metrics)
	commits   int64       // its event-log transactions in the window
	rounds    int
	roundP99  []time.Duration
}

// durability is what the post-crash lookup found.
type durability struct {
	checked, missing, mismatched, beyond int
	err                                  string
}

func (d *durability) failed() bool {
	return d.err != "" || d.missing+d.mismatched > 0 || d.checked == 0
}

func (d *durability) String() string {
	if d.err != "" {
		return d.err
	}
	return fmt.Sprintf("after SIGKILL mid-stream, %d received events looked up in the store: %d missing, %d with another event_id (%d more were committed but not yet delivered at the kill)",
		d.checked, d.missing, d.mismatched, d.beyond)
}

// add pools another round of the same target.
func (r *loadResult) add(o *loadResult) {
	r.rounds++
	r.roundP99 = append(r.roundP99, percentiles(o.lat).p99)
	r.lat = append(r.lat, o.lat...)
	slices.Sort(r.lat)
	r.sent += o.sent
	r.committed += o.committed
	r.commits += o.commits
	r.window += o.window
	r.serverCPU += o.serverCPU
	r.toolCPU += o.toolCPU
	r.otherCPU += o.otherCPU
	r.load = strings.TrimPrefix(r.load+"; "+o.load, "; ")
	r.rssKB = max(r.rssKB, o.rssKB)
	r.seqErrors += o.seqErrors
	r.startErrs = append(r.startErrs, o.startErrs...)
	for k, v := range o.endings {
		r.endings[k] += v
	}
	if o.durable != nil {
		if r.durable == nil {
			r.durable = &durability{}
		}
		r.durable.checked += o.durable.checked
		r.durable.missing += o.durable.missing
		r.durable.mismatched += o.durable.mismatched
		r.durable.beyond += o.durable.beyond
		if o.durable.err != "" {
			r.durable.err = o.durable.err
		}
	}
}

// runLoad drives cfg.runs clients against wsURL. finish is called after the
// window and tail, while the streams are still running; it must make every
// stream end (kill the platform, or tell the agents to send done).
func runLoad(name string, cfg latencyConfig, wsURL, metricsURL string, serverPID int, ag *benchAgent, w *window, logged bool, finish func()) (*loadResult, []*clientResult) {
	results := make([]*clientResult, cfg.runs)
	var wg sync.WaitGroup
	var startWG sync.WaitGroup
	startWG.Add(cfg.runs)
	for i := range cfg.runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(cfg.stagger * time.Duration(i) / time.Duration(cfg.runs))
			results[i] = runClient(wsURL, w, logged, startWG.Done)
		}()
	}
	startWG.Wait()
	// The window opens a warm-up after the last run was invoked.
	start := time.Since(base) + cfg.warmup
	end := start + cfg.duration
	w.set(start, end)
	time.Sleep(start - time.Since(base))
	var m0, m1 map[string]float64
	if metricsURL != "" {
		m0 = scrapeMetrics(metricsURL)
	}
	cpu0, self0, all0, load0 := procCPU(serverPID), procCPU(os.Getpid()), machineBusy(), loadAvg()
	time.Sleep(end - time.Since(base))
	cpu1, self1, all1, load1 := procCPU(serverPID), procCPU(os.Getpid()), machineBusy(), loadAvg()
	if metricsURL != "" {
		m1 = scrapeMetrics(metricsURL)
	}
	rss, _ := procStatusKB(serverPID, "VmRSS")
	time.Sleep(cfg.tail)
	finish()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "warning: some clients did not end within 30 s")
	}
	r := &loadResult{name: name, streams: cfg.runs, sent: ag.sent.Load(), window: cfg.duration, serverCPU: cpu1 - cpu0, toolCPU: self1 - self0, rssKB: rss, endings: map[string]int{},
		otherCPU: (all1 - all0) - (cpu1 - cpu0) - (self1 - self0), load: load0 + " → " + load1}
	if m0 != nil && m1 != nil {
		r.committed = int64(m1["agentplane_events_appended_total"] - m0["agentplane_events_appended_total"])
		r.commits = int64(m1["agentplane_event_commits_total"] - m0["agentplane_event_commits_total"])
	}
	for _, c := range results {
		if c == nil {
			continue
		}
		if c.startErr != nil {
			r.startErrs = append(r.startErrs, c.startErr)
			continue
		}
		r.lat = append(r.lat, c.lat...)
		r.seqErrors += c.seqErrors
		end := c.ended
		if strings.HasPrefix(end, "read: ") {
			end = "connection closed"
		}
		r.endings[end]++
	}
	slices.Sort(r.lat)
	return r, results
}

// measureBaseline runs the same load through the relay: agent SSE parsed by
// the platform's own reader (internal/agent), forwarded on a WebSocket, no
// persistence, no run machinery.
func measureBaseline(cfg latencyConfig) (*loadResult, error) {
	w := newWindow()
	ag, err := startAgent(cfg.rate, w)
	if err != nil {
		return nil, err
	}
	defer ag.close()
	relay, err := selfProc("relay", []string{"relay", "-agent", ag.URL}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer relay.Stop(10 * time.Second)
	r, _ := runLoad("baseline relay (no persistence)", cfg, relay.WSURL("/ws"), "", relay.Pid(), ag, w, false, func() { close(ag.stop) })
	return r, nil
}

// measurePlatform runs the load through the real binary on dsn, then kills
// it mid-stream (SIGKILL) and checks that every event any client received
// is in the store with the same event_id: nothing was delivered that a
// crash could lose.
func measurePlatform(cfg latencyConfig, bin, dialect, dsn string) (*loadResult, error) {
	w := newWindow()
	ag, err := startAgent(cfg.rate, w)
	if err != nil {
		return nil, err
	}
	defer ag.close()
	p, err := startPlatform(bin, dsn, nil, serverLogger(dialect))
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	if err := registerAgent(p.URL, agentID, ag.URL); err != nil {
		return nil, err
	}
	r, clients := runLoad("agentplane "+dialect, cfg, p.WSURL("/v1/ws"), p.URL, p.Pid(), ag, w, true, p.Kill)
	if len(r.startErrs) > 0 {
		fmt.Fprintf(os.Stderr, "platform output:\n%s\n", p.Tail())
	}
	r.durable = verifyDurable(dialect, dsn, clients)
	return r, nil
}

var serverLog string

// serverLogger returns a stderr line sink writing to -server-log, or nil.
func serverLogger(tag string) func(string) {
	if serverLog == "" {
		return nil
	}
	f, err := os.OpenFile(serverLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server log:", err)
		return nil
	}
	var mu sync.Mutex
	return func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, "[%s] %s\n", tag, line)
	}
}

// verifyDurable opens the store the killed platform left and looks up every
// event the clients received.
func verifyDurable(dialect, dsn string, clients []*clientResult) *durability {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var st store.Store
	var err error
	if dialect == "sqlite" {
		st, err = sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	} else {
		// The pool this benchmark was first measured with (the default
		// was 32 then), so its numbers stay comparable.
		st, err = postgres.Open(ctx, dsn, postgres.Options{MaxConns: 32})
	}
	if err != nil {
		return &durability{err: "could not open the store: " + err.Error()}
	}
	defer st.Close()
	var checked, missing, mismatched, beyond int
	for _, c := range clients {
		if c == nil || c.sessionID == "" {
			continue
		}
		stored := map[int64]string{}
		after := int64(0)
		for {
			evs, err := st.EventsList(ctx, &store.EventsListParams{SessionID: c.sessionID, AfterSeq: after, Limit: 5000})
			if err != nil {
				return &durability{err: "list events: " + err.Error()}
			}
			for _, e := range evs {
				stored[e.Seq] = e.EventID
			}
			if len(evs) < 5000 {
				break
			}
			after = evs[len(evs)-1].Seq
		}
		for _, g := range c.got {
			checked++
			id, ok := stored[g.seq]
			switch {
			case !ok:
				missing++
			case id != g.eventID:
				mismatched++
			}
		}
		if len(c.got) > 0 {
			for s := range stored {
				if s > c.got[len(c.got)-1].seq {
					beyond++
				}
			}
		}
	}
	return &durability{checked: checked, missing: missing, mismatched: mismatched, beyond: beyond}
}

type pct struct {
	p50, p90, p99, p999, max, mean time.Duration
}

func percentiles(s []time.Duration) pct {
	if len(s) == 0 {
		return pct{}
	}
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return pct{at(0.50), at(0.90), at(0.99), at(0.999), s[len(s)-1], sum / time.Duration(len(s))}
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func (r *loadResult) print() {
	p := percentiles(r.lat)
	fmt.Printf("## %s\n", r.name)
	fmt.Printf("received %d of %d deltas sent in the %s window (%.0f/s); p50 %s ms, p90 %s ms, p99 %s ms, p99.9 %s ms, max %s ms, mean %s ms\n",
		len(r.lat), r.sent, r.window, float64(len(r.lat))/r.window.Seconds(), ms(p.p50), ms(p.p90), ms(p.p99), ms(p.p999), ms(p.max), ms(p.mean))
	fmt.Printf("server CPU per delivered event %s µs; ", cpuPerEvent(r))
	fmt.Printf("CPU (cores): server %.2f, load tool %.2f, other processes %.2f (PostgreSQL included; load average %s); server RSS %d MiB; seq order errors %d; start errors %d; stream endings %v\n",
		r.serverCPU.Seconds()/r.window.Seconds(), r.toolCPU.Seconds()/r.window.Seconds(), r.otherCPU.Seconds()/r.window.Seconds(), r.load,
		r.rssKB/1024, r.seqErrors, len(r.startErrs), r.endings)
	for i, e := range r.startErrs {
		if i == 3 {
			break
		}
		fmt.Printf("  start error: %v\n", e)
	}
	if r.commits > 0 {
		fmt.Printf("event log (GET /metrics): %d events committed in %d transactions (%.1f events/commit, %.0f commits/s)\n",
			r.committed, r.commits, float64(r.committed)/float64(r.commits), float64(r.commits)/r.window.Seconds())
	}
	if r.durable != nil {
		verdict := "OK"
		if r.durable.failed() {
			verdict = "FAILED"
		}
		fmt.Printf("durable before delivery: %s — %s\n", verdict, r.durable)
	}
	fmt.Println()
}

// cpuPerEvent is the server's CPU time in the window over the deltas
// delivered in it (the few other events a run logs are not counted).
func cpuPerEvent(r *loadResult) string {
	if len(r.lat) == 0 {
		return "—"
	}
	return strconv.FormatFloat(float64(r.serverCPU)/float64(time.Microsecond)/float64(len(r.lat)), 'f', 1, 64)
}

// p99Target is issue 13's delivery target for a target at n streams: p99
// ≤ 10 ms on SQLite and ≤ 15 ms on PostgreSQL up to 200 streams, ≤ 100 ms
// for both at 1,000.
func p99Target(kind string, n int) time.Duration {
	switch {
	case n > 200:
		return 100 * time.Millisecond
	case kind == "postgres":
		return 15 * time.Millisecond
	default:
		return 10 * time.Millisecond
	}
}

func printLatencySummary(all [][]*loadResult) {
	fmt.Println("## summary, all rounds pooled (ms; ratio = target ÷ the baseline relay of this run; CPU per delivered event from /proc/PID/stat)")
	fmt.Println()
	fmt.Println("| streams | target | deltas received/sent | delivered/s | p50 | p99 | p99 per round | p50 ratio | p99 ratio | p99 target | server CPU µs/event | CPU µs/event ratio | durable before delivery | events/commit | CPU cores: server / others | load average (window start → end) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, rs := range all {
		var baseline *loadResult
		for _, r := range rs {
			if strings.HasPrefix(r.name, "baseline") {
				baseline = r
			}
		}
		for _, r := range rs {
			p := percentiles(r.lat)
			r50, r99, rcpu := "—", "—", "—"
			if baseline != nil && baseline != r && len(baseline.lat) > 0 {
				b := percentiles(baseline.lat)
				r50 = fmt.Sprintf("%.1f×", float64(p.p50)/float64(b.p50))
				r99 = fmt.Sprintf("%.1f×", float64(p.p99)/float64(b.p99))
				if len(r.lat) > 0 && baseline.serverCPU > 0 {
					rcpu = fmt.Sprintf("%.1f×", (float64(r.serverCPU)/float64(len(r.lat)))/(float64(baseline.serverCPU)/float64(len(baseline.lat))))
				}
			}
			target := "—"
			if r != baseline {
				kind := "sqlite"
				if strings.Contains(r.name, "postgres") {
					kind = "postgres"
				}
				lim := p99Target(kind, r.streams)
				target = "≤ " + ms(lim) + " met"
				if p.p99 > lim || len(r.lat) == 0 || int64(len(r.lat)) < r.sent {
					target = "≤ " + ms(lim) + " **missed**"
				}
			}
			durable := "—"
			if r.durable != nil {
				durable = fmt.Sprintf("verified (%d events, none lost)", r.durable.checked)
				if r.durable.failed() {
					durable = "**FAILED**: " + r.durable.String()
				}
			}
			var per []string
			for _, d := range r.roundP99 {
				per = append(per, ms(d))
			}
			secs := r.window.Seconds()
			perCommit := "—"
			if r.commits > 0 {
				perCommit = fmt.Sprintf("%.1f", float64(r.committed)/float64(r.commits))
			}
			fmt.Printf("| %d | %s | %d/%d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f / %.2f | %s |\n", r.streams, r.name, len(r.lat), r.sent,
				float64(len(r.lat))/secs, ms(p.p50), ms(p.p99), strings.Join(per, ", "), r50, r99, target, cpuPerEvent(r), rcpu, durable, perCommit,
				r.serverCPU.Seconds()/secs, r.otherCPU.Seconds()/secs, r.load)
		}
	}
	fmt.Println()
	fmt.Println("CPU \"others\" is every other process on the machine during the windows (PostgreSQL's own backends included, so PostgreSQL's CPU is not in the server's µs/event).")
	fmt.Println()
}
