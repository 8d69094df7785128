// Command console measures the operator console (issue 11) on a session of 100,000 events:
// time to first paint of the session view and to the start of its replay in headless Chromium,
// and the server's memory while it streams the session — to the console, to a client following
// the whole log over SSE, and page by page through the events API. A session of 1,000 events is
// streamed the same way as the baseline, in the same run: a server that held the session in
// memory would need ~100× more for the long one.
//
//	go run ./bench/console                 # SQLite, 3 rounds
//	go run ./bench/console -store postgres # PostgreSQL at AGENTPLANE_TEST_POSTGRES
//
// The session is seeded straight into a real store (the events the platform writes for a run
// that calls a model twice and a tool, and streams ~490 deltas), then the real binary serves it.
// Chromium is Debian's (/usr/bin/chromium), driven with chromedp as the browser tests do.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

func run() error {
	storeKind := flag.String("store", "sqlite", "sqlite or postgres")
	events := flag.Int("events", 100_000, "events in the long session")
	small := flag.Int("small", 1_000, "events in the baseline session")
	rounds := flag.Int("rounds", 3, "measurement rounds")
	chromium := flag.String("chromium", "/usr/bin/chromium", "the Chromium binary")
	fullReplay := flag.Bool("full-replay", true, "also replay the long session to its end at instant speed")
	flag.Parse()

	dir, err := os.MkdirTemp("", "bench-console-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("machine: %d CPUs (%s), %s; go %s; load average %s at start\n", runtime.NumCPU(), cpuModel(), memTotal(), runtime.Version(), benchproc.LoadAvg())
	bin, err := benchproc.BuildPlatform(dir)
	if err != nil {
		return err
	}
	var dsn string
	switch *storeKind {
	case "sqlite":
		dsn = "sqlite:" + filepath.Join(dir, "console.db")
	case "postgres":
		d, drop, err := benchproc.PostgresSchema(benchproc.PostgresURL())
		if err != nil {
			return err
		}
		defer drop()
		dsn = d
	default:
		return fmt.Errorf("-store must be sqlite or postgres")
	}

	t0 := time.Now()
	long, err := seed(dsn, *events)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	short, err := seed(dsn, *small)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	fmt.Printf("seeded %s (%d events, %d runs) and %s (%d events) into %s in %s\n", long.id, *events, long.runs, short.id, *small, *storeKind, time.Since(t0).Round(time.Millisecond))

	srv, err := benchproc.StartPlatform(bin, dsn, nil, nil)
	if err != nil {
		return err
	}
	defer srv.Stop(30 * time.Second)
	pid := srv.Pid()
	time.Sleep(2 * time.Second) // let start-up settle
	idle := rssKB(pid)
	fmt.Printf("server %s pid %d, idle RSS %.1f MiB\n\n", srv.URL, pid, mib(idle))

	b, err := newBrowser(*chromium)
	if err != nil {
		return err
	}
	defer b.close()

	var res results
	for r := 1; r <= *rounds; r++ {
		fmt.Printf("round %d (load %s)\n", r, benchproc.LoadAvg())
		for _, s := range []*seeded{short, long} {
			m := newMeter(pid)
			ttfp, rows, err := b.firstPaint(srv.URL, "/console/sessions/"+s.id, `.timeline .tl-row`)
			peak, rise := m.stop()
			if err != nil {
				return fmt.Errorf("session view of %s: %w", s.id, err)
			}
			res.add(s, "view", ttfp, peak, rise)
			fmt.Printf("  %-7s session view: first row painted %7.1f ms (%d rows in the DOM), server RSS peak %.1f MiB (+%.1f)\n", s.label, ttfp, rows, mib(peak), mib(rise))

			m = newMeter(pid)
			ttfp, _, err = b.firstPaint(srv.URL, "/console/sessions/"+s.id+"/replay?speed=1&autoplay=1", `.timeline-pane .tl-row`)
			peak, rise = m.stop()
			if err != nil {
				return fmt.Errorf("replay of %s: %w", s.id, err)
			}
			res.add(s, "replay", ttfp, peak, rise)
			fmt.Printf("  %-7s replay:       first row painted %7.1f ms, server RSS peak %.1f MiB (+%.1f)\n", s.label, ttfp, mib(peak), mib(rise))

			m = newMeter(pid)
			d, n, err := followAll(srv.URL, s.id, s.events)
			peak, rise = m.stop()
			if err != nil {
				return fmt.Errorf("follow %s: %w", s.id, err)
			}
			res.add(s, "follow", float64(d.Milliseconds()), peak, rise)
			fmt.Printf("  %-7s SSE follow of the whole log: %d events in %s (%.0f/s), server RSS peak %.1f MiB (+%.1f)\n", s.label, n, d.Round(time.Millisecond), float64(n)/d.Seconds(), mib(peak), mib(rise))

			m = newMeter(pid)
			d, n, size, err := pageAll(srv.URL, s.id)
			peak, rise = m.stop()
			if err != nil {
				return fmt.Errorf("page %s: %w", s.id, err)
			}
			res.add(s, "pages", float64(d.Milliseconds()), peak, rise)
			fmt.Printf("  %-7s events API, 1,000 a page: %d events (%.1f MiB of JSON) in %s, server RSS peak %.1f MiB (+%.1f)\n", s.label, n, float64(size)/(1<<20), d.Round(time.Millisecond), mib(peak), mib(rise))
		}
	}
	if *fullReplay {
		m := newMeter(pid)
		d, err := b.replayToEnd(srv.URL, long.id)
		peak, rise := m.stop()
		if err != nil {
			return fmt.Errorf("full replay: %w", err)
		}
		fmt.Printf("\nreplay of the long session to its end at instant speed: %s (%.0f events/s), server RSS peak %.1f MiB (+%.1f)\n", d.Round(time.Millisecond), float64(long.events)/d.Seconds(), mib(peak), mib(rise))
	}
	fmt.Printf("\nsummary over %d rounds (median, min–max); server idle RSS %.1f MiB, VmHWM %.1f MiB, load average %s at the end\n", *rounds, mib(idle), mib(hwmKB(pid)), benchproc.LoadAvg())
	res.print(short, long)
	return nil
}

// --- seeding ---

type seeded struct {
	id     string
	label  string
	events int
	runs   int
}

// perRun is the events of one seeded run: what the platform writes for a run whose agent calls a
// model, a server tool (allowed by policy), the model again, and streams its answer.
const perRun = 500

// seed writes a session of n events (n/500 runs) into the store at dsn.
func seed(dsn string, n int) (*seeded, error) {
	ctx := context.Background()
	var st store.Store
	var err error
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		st, err = sqlite.Open(ctx, path)
	} else {
		st, err = postgres.Open(ctx, dsn, postgres.Options{})
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	s := &seeded{id: ids.New("ses"), events: n, runs: (n + perRun - 1) / perRun}
	s.label = fmt.Sprintf("%dk", n/1000)
	start := time.Now().Add(-time.Duration(s.runs) * time.Minute).UnixMilli()
	if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: s.id, UserID: benchproc.UserID, CreatedAt: start}); err != nil {
		return nil, err
	}
	var batch []store.EventParams
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := st.EventsAppend(ctx, batch)
		batch = batch[:0]
		return err
	}
	left := n
	for r := 0; r < s.runs; r++ {
		runID := ids.New("run")
		at := start + int64(r)*60_000
		if _, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: runID, SessionID: s.id, AgentID: "bench-agent", UserID: benchproc.UserID, Owner: "bench", StartedAt: at}); err != nil {
			return nil, err
		}
		evs := runEvents(s.id, runID, at, min(left, perRun))
		left -= len(evs)
		batch = append(batch, evs...)
		if len(batch) >= 5000 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		end := evs[len(evs)-1].TS
		if _, err := st.RunTransition(ctx, &store.RunTransitionParams{RunID: runID, From: store.RunActiveStatuses, Status: store.RunDone, At: end, Usage: json.RawMessage(`{"prompt_tokens":300,"completion_tokens":120}`)}); err != nil {
			return nil, err
		}
	}
	return s, flush()
}

func j(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// runEvents is one run of n events (n ≤ perRun; the deltas make up the rest).
func runEvents(sid, runID string, at int64, n int) []store.EventParams {
	var out []store.EventParams
	ts := at
	add := func(typ string, payload any, step int64) {
		ts += step
		out = append(out, store.EventParams{SessionID: sid, RunID: runID, TS: ts, Type: typ, Payload: j(payload)})
	}
	msg := map[string]any{"role": "user", "content": "What's the weather in Paris, and book me a table?"}
	llm := func(call string, p, c int) {
		add("llm_call_started", map[string]any{"call_id": call, "model": "gpt-4o-mini", "endpoint": "chat.completions", "stream": true}, 5)
		add("llm_call_done", map[string]any{"call_id": call, "model": "gpt-4o-mini", "endpoint": "chat.completions", "stream": true, "status": 200, "outcome": "ok",
			"attempts": 1, "latency_ms": 812.5, "ttft_ms": 230.1, "proxy_overhead_ms": 0.21, "prompt_tokens": p, "completion_tokens": c, "cached_tokens": p / 2,
			"reasoning_tokens": 0, "total_tokens": p + c, "estimated_cost": float64(p)*0.15e-6 + float64(c)*0.6e-6, "partial": false}, 800)
	}
	add("user_input", map[string]any{"message": msg}, 0)
	add("run_started", map[string]any{"request_id": "r", "agent_id": "bench-agent", "message": msg}, 0)
	add("agent_invoke_started", map[string]any{"agent_id": "bench-agent", "endpoint": "http://127.0.0.1:9/"}, 1)
	add("state", map[string]any{"state": "thinking", "detail": map[string]any{"model": "gpt-4o-mini"}, "source": "agent"}, 2)
	llm(ids.New("call"), 300, 40)
	tc := ids.New("tc")
	add("tool_call_created", map[string]any{"tool_call_id": tc, "tool_name": "weather.lookup", "kind": "server", "args": map[string]any{"city": "Paris"}, "timeout_ms": 60000}, 3)
	add("policy_decision", map[string]any{"tool_call_id": tc, "tool_name": "weather.lookup", "decision": "allow", "rule": "default"}, 1)
	add("tool_dispatched", map[string]any{"tool_call_id": tc, "tool_name": "weather.lookup", "kind": "server", "attempt": 1}, 1)
	add("tool_result", map[string]any{"tool_call_id": tc, "tool_name": "weather.lookup", "state": "SUCCEEDED", "status": "succeeded", "duration_ms": 42, "exec_ms": 38,
		"result": map[string]any{"city": "Paris", "temp_c": 19, "conditions": "partly cloudy"}}, 42)
	llm(ids.New("call"), 420, 80)
	deltas := n - len(out) - 2
	for i := 0; i < deltas; i++ {
		add("agent_stream_delta", map[string]any{"text": fmt.Sprintf("word%d of the answer, ", i)}, 20)
	}
	add("agent_invoke_done", map[string]any{"ok": true, "duration_ms": ts - at, "deltas": deltas}, 1)
	add("run_done", map[string]any{"usage": map[string]any{"prompt_tokens": 720, "completion_tokens": 120}, "total_cost": 0.000252, "llm_calls": 2}, 0)
	return out[:min(len(out), n)]
}

// --- server memory ---

func rssKB(pid int) int64 {
	v, _ := benchproc.ProcStatusKB(pid, "VmRSS")
	return v
}

func hwmKB(pid int) int64 {
	v, _ := benchproc.ProcStatusKB(pid, "VmHWM")
	return v
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

// meter samples a process's RSS every 10 ms until stop, and returns the peak.
type meter struct {
	start int64
	peak  atomic.Int64
	done  chan struct{}
	wg    sync.WaitGroup
}

func newMeter(pid int) *meter {
	m := &meter{done: make(chan struct{}), start: rssKB(pid)}
	m.peak.Store(m.start)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				if v := rssKB(pid); v > m.peak.Load() {
					m.peak.Store(v)
				}
			}
		}
	}()
	return m
}

// stop ends the sampling and returns the peak RSS and its rise over the RSS at the start.
func (m *meter) stop() (peak, rise int64) {
	close(m.done)
	m.wg.Wait()
	return m.peak.Load(), m.peak.Load() - m.start
}

// --- clients that read the whole log ---

// followAll reads the session over the follow stream until the last of its events.
func followAll(base, sid string, want int) (time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/sessions/"+sid+"/events?follow=1&after_seq=0", nil)
	req.Header.Set("Authorization", "Bearer "+benchproc.AdminKey)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
			if n == want {
				return time.Since(start), n, nil
			}
		}
	}
	return time.Since(start), n, fmt.Errorf("stream ended after %d of %d events: %v", n, want, sc.Err())
}

// pageAll reads the session's events 1,000 at a time; size is the JSON read.
func pageAll(base, sid string) (d time.Duration, n int, size int64, err error) {
	start := time.Now()
	after := int64(0)
	for {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/sessions/%s/events?after_seq=%d&limit=1000", base, sid, after), nil)
		req.Header.Set("Authorization", "Bearer "+benchproc.AdminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, n, size, err
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, n, size, err
		}
		size += int64(len(raw))
		var body struct {
			Events       []json.RawMessage `json:"events"`
			NextAfterSeq int64             `json:"next_after_seq"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return 0, n, size, err
		}
		n += len(body.Events)
		after = body.NextAfterSeq
		if len(body.Events) < 1000 {
			return time.Since(start), n, size, nil
		}
	}
}

// --- the browser ---

type browser struct {
	ctx    context.Context
	cancel func()
}

func newBrowser(path string) (*browser, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("Chromium at %s: %w (apt-get install chromium)", path, err)
	}
	profile, err := os.MkdirTemp("", "bench-console-chromium-")
	if err != nil {
		return nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true), chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true), chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		return nil, fmt.Errorf("start Chromium: %w", err)
	}
	return &browser{ctx: ctx, cancel: func() { cancelCtx(); cancelAlloc(); os.RemoveAll(profile) }}, nil
}

func (b *browser) close() { b.cancel() }

// probeJS runs before the page's own scripts: it logs the console in (session storage, as the
// login form would) and records when the first element matching the selector was painted: a
// frame after it was inserted, in ms since navigation start.
const probeJS = `sessionStorage.setItem('agentplane.console.key', JSON.stringify({key: %q, kind: 'admin', user_id: ''}));
window.__firstPaint = 0;
new MutationObserver(function (muts, obs) {
  if (window.__firstPaint || !document.querySelector(%q)) return;
  obs.disconnect();
  requestAnimationFrame(function () { setTimeout(function () { window.__firstPaint = performance.now(); }, 0); });
}).observe(document, {childList: true, subtree: true});`

// open makes a fresh tab with the probe installed and navigates it to base+path.
func (b *browser) open(base, path, sel string, timeout time.Duration) (context.Context, func(), error) {
	tab, cancelTab := chromedp.NewContext(b.ctx)
	if err := chromedp.Do(tab); err != nil { // opens the tab (no deadline on the first call)
		cancelTab()
		return nil, nil, err
	}
	ctx, cancelT := context.WithTimeout(tab, timeout)
	cancel := func() { cancelT(); cancelTab() }
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: fmt.Sprintf(probeJS, benchproc.AdminKey, sel),
	}); err != nil {
		cancel()
		return nil, nil, err
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+path)); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// firstPaint opens path in a fresh tab and returns the time to the first painted match of sel
// (ms since navigation start) and how many rows the page then had in the DOM.
func (b *browser) firstPaint(base, path, sel string) (float64, int, error) {
	ctx, cancel, err := b.open(base, path, sel, 2*time.Minute)
	if err != nil {
		return 0, 0, err
	}
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.__firstPaint > 0`, chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		return 0, 0, err
	}
	ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.__firstPaint`))
	if err != nil {
		return 0, 0, err
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`))
	return ms, rows, err
}

// replayToEnd plays the session at instant speed and returns the time from navigation to
// the end of the replay.
func (b *browser) replayToEnd(base, sid string) (time.Duration, error) {
	ctx, cancel, err := b.open(base, "/console/sessions/"+sid+"/replay?speed=instant&autoplay=1", `.timeline-pane .tl-row`, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(function () { var s = window.agentplaneConsole && window.agentplaneConsole.page() === 'replay' && window.agentplaneConsole.state(); return !!(s && s.finished); })()`,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(9*time.Minute))); err != nil {
		return 0, err
	}
	ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.now()`))
	return time.Duration(ms * float64(time.Millisecond)), err
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// --- results ---

type sample struct {
	ms         float64
	peak, rise int64
}

type results struct {
	m map[string][]sample // "<label>/<what>"
}

func (r *results) add(s *seeded, what string, ms float64, peak, rise int64) {
	if r.m == nil {
		r.m = map[string][]sample{}
	}
	k := s.label + "/" + what
	r.m[k] = append(r.m[k], sample{ms, peak, rise})
}

func stats(xs []float64) (med, lo, hi float64) {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func (r *results) print(short, long *seeded) {
	fmt.Printf("%-34s %-44s %-44s\n", "", short.label+" events: time; server RSS peak (max rise)", long.label+" events: time; server RSS peak (max rise)")
	for _, w := range []struct{ key, what string }{
		{"view", "session view, first row painted"}, {"replay", "replay, first row painted"},
		{"follow", "SSE follow of the whole log"}, {"pages", "events API, all pages"},
	} {
		line := fmt.Sprintf("%-34s", w.what)
		for _, s := range []*seeded{short, long} {
			var ms, peaks, rises []float64
			for _, x := range r.m[s.label+"/"+w.key] {
				ms = append(ms, x.ms)
				peaks = append(peaks, mib(x.peak))
				rises = append(rises, mib(x.rise))
			}
			a, b, c := stats(ms)
			_, _, p := stats(peaks)
			_, _, q := stats(rises)
			line += fmt.Sprintf(" %6.0f ms (%.0f–%.0f); %5.1f MiB (+%.1f)     ", a, b, c, p, q)
		}
		fmt.Println(line)
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var n int64
			fmt.Sscan(strings.TrimSpace(v), &n)
			return fmt.Sprintf("%.0f GiB RAM", float64(n)/1024/1024)
		}
	}
	return "?"
}
