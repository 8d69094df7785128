package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func waitsMain(args []string) error {
	fs := flag.NewFlagSet("waits", flag.ExitOnError)
	var cf commonFlags
	cf.register(fs, 2)
	n := fs.Int("n", 5000, "pending tool calls, each held by one :wait long-poll on a connection of its own")
	runs := fs.Int("runs", 100, "live runs the pending calls are spread over")
	idle := fs.Duration("idle", 20*time.Second, "how long the idle keep-alive connections (the baseline) are held before RSS is read")
	hold := fs.Duration("hold", 2*time.Minute, "how long the long-polls are held once all are parked")
	every := fs.Duration("every", 10*time.Second, "sampling interval while holding")
	waitMS := fs.Int("wait-ms", 30000, "each :wait's timeout_ms (the SDK's 30 s); a random 0–20 % is taken off each so re-issues spread")
	dialConc := fs.Int("dial-concurrency", 50, "connections being opened at once")
	fs.Parse(args)
	stores, err := cf.storeList()
	if err != nil {
		return err
	}
	limit, err := raiseNoFile()
	if err != nil {
		return err
	}
	if limit < uint64(*n)+500 {
		return fmt.Errorf("the fd limit is %d; %d connections need about %d (raise `ulimit -n`)", limit, *n, *n+500)
	}
	dir, bin, err := buildTmp(cf.bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	header(fmt.Sprintf("%d concurrent pending :wait long-polls — server memory; baseline: as many idle keep-alive connections (GET /healthz, then idle) on the same server; RSS from /proc/PID/status, Go heap from GODEBUG=gctrace=1; hold %s, :wait timeout_ms %d with jitter, %d rounds", *n, *hold, *waitMS, cf.rounds))
	var all []*waitsResult
	for round := 1; round <= cf.rounds; round++ {
		for _, store := range stores {
			r, err := measureWaits(waitsConfig{store: store, bin: bin, dir: dir, pg: cf.pg, serverLog: cf.serverLog, n: *n, runs: *runs,
				idle: *idle, hold: *hold, every: *every, waitMS: *waitMS, dialConc: *dialConc})
			if err != nil {
				return fmt.Errorf("%s: %w", store, err)
			}
			r.round = round
			r.print()
			all = append(all, r)
		}
	}
	fmt.Println("## summary (KiB = 1024 B; per connection / per wait = RSS delta ÷ n; steady = the last third of the hold)")
	fmt.Println()
	fmt.Println("| store, round | n | RSS before | + idle keep-alive conns | + waits on them: all parked → steady mean | per idle conn (baseline) | per wait, beyond its connection | per wait, connection included | steady RSS min–max (change) | Go heap live per idle conn / per wait beyond it | goroutine stacks per wait | GCs during hold | waits answered & re-issued | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range all {
		ss := r.steady()
		fmt.Printf("| %s, %d | %d | %.1f MiB | %.1f MiB | %.1f → %.1f MiB | %.1f KiB | %.1f KiB | %.1f KiB | %.1f–%.1f MiB (%+.1f) | %s / %s | %s | %d | %d | %d |\n",
			r.store, r.round, r.n, mib(r.rss0), mib(r.rssIdle), mib(r.samples[0].rss), mib(r.steadyMean()), r.perIdle()/1024, r.perWait()/1024, r.perWaitTotal()/1024,
			mib(r.steadyMin()), mib(r.steadyMax()), mib(ss[len(ss)-1].rss-ss[0].rss),
			perN(r.gc0, r.gcIdle, r.n, func(m gcMark) int64 { return m.live }), perN(r.gcIdle, r.gcHold, r.n, func(m gcMark) int64 { return m.live }),
			perN(r.gcIdle, r.gcHold, r.n, func(m gcMark) int64 { return m.stacks }), r.gcHold.n-r.gcIdle.n, r.reissued, r.errors)
	}
	fmt.Println()
	return nil
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

// perN is the growth of an MB figure between two GCs, per item, in KiB
// ("?" when no GC happened in between).
func perN(a, b gcMark, n int, f func(gcMark) int64) string {
	if a.n == 0 || b.n <= a.n {
		return "? (no GC)"
	}
	return fmt.Sprintf("%.1f KiB", float64(f(b)-f(a))*1024/float64(n))
}

type waitsConfig struct {
	store, bin, dir, pg, serverLog string
	n, runs, waitMS, dialConc      int
	idle, hold, every              time.Duration
}

type waitsSample struct {
	at      time.Duration // since the waits were all parked
	rss     int64         // kB
	pending float64       // the server's agentplane_tool_waits_pending
	threads int64
	gc      gcMark // the last GC by then
}

type waitsResult struct {
	store                string
	round, n             int
	rss0, rssIdle        int64 // kB
	samples              []waitsSample
	gc0, gcIdle, gcHold  gcMark
	createTime, parkTime time.Duration
	reissued, errors     int64
	holdCPU              cpuUse
	firstErr             string
}

// steady is the samples of the last third of the hold: by then every wait
// has timed out and been re-issued at least once (with the default 30 s
// waits and a hold of 3 minutes, four times), so the runtime has seen the
// churn; memory that still grows there is not bounded.
func (r *waitsResult) steady() []waitsSample {
	last := r.samples[len(r.samples)-1].at
	for i, x := range r.samples {
		if x.at >= last*2/3 {
			return r.samples[i:]
		}
	}
	return r.samples[len(r.samples)-1:]
}

func (r *waitsResult) steadyMean() int64 {
	var s int64
	ss := r.steady()
	for _, x := range ss {
		s += x.rss
	}
	return s / int64(len(ss))
}

func (r *waitsResult) steadyMin() int64 {
	ss := r.steady()
	m := ss[0].rss
	for _, x := range ss {
		m = min(m, x.rss)
	}
	return m
}

func (r *waitsResult) steadyMax() int64 {
	ss := r.steady()
	m := ss[0].rss
	for _, x := range ss {
		m = max(m, x.rss)
	}
	return m
}

func (r *waitsResult) perIdle() float64 { return float64(r.rssIdle-r.rss0) * 1024 / float64(r.n) }
func (r *waitsResult) perWait() float64 {
	return float64(r.steadyMean()-r.rssIdle) * 1024 / float64(r.n)
}
func (r *waitsResult) perWaitTotal() float64 {
	return float64(r.steadyMean()-r.rss0) * 1024 / float64(r.n)
}

func (r *waitsResult) print() {
	fmt.Printf("## %s, round %d\n", r.store, r.round)
	fmt.Printf("%d pending calls created in %s; VmRSS %d KiB before any connection (last GC: %s)\n", r.n, r.createTime.Round(time.Millisecond), r.rss0, r.gc0)
	fmt.Printf("%d idle keep-alive connections: VmRSS %d KiB (last GC: %s) → %.0f B per connection\n", r.n, r.rssIdle, r.gcIdle, r.perIdle())
	fmt.Printf("a :wait on each: all parked %s after the first was sent; %s while holding\n", r.parkTime.Round(time.Millisecond), r.holdCPU)
	for _, s := range r.samples {
		fmt.Printf("  t=%4.0fs  VmRSS %7d KiB  waits pending (server) %5.0f  threads %3d  last GC: %s\n", s.at.Seconds(), s.rss, s.pending, s.threads, s.gc)
	}
	ss := r.steady()
	fmt.Printf("→ steady state (last third of the hold, t ≥ %.0f s): RSS %d–%d KiB, change %+d KiB; %.0f B per wait beyond its connection, %.0f B per wait with it; %d waits timed out and were re-issued; %d errors %s\n\n",
		ss[0].at.Seconds(), r.steadyMin(), r.steadyMax(), ss[len(ss)-1].rss-ss[0].rss, r.perWait(), r.perWaitTotal(), r.reissued, r.errors, r.firstErr)
}

// rawConn is one client connection the bench drives by hand, so that the
// idle baseline and the long-polls use exactly the same sockets.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (rc *rawConn) roundTrip(method, path, key string) (*http.Response, []byte, error) {
	req := method + " " + path + " HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\n"
	if key != "" {
		req += "Authorization: Bearer " + key + "\r\n"
	}
	req += "\r\n"
	if _, err := io.WriteString(rc.c, req); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, err
}

func measureWaits(cfg waitsConfig) (*waitsResult, error) {
	e, err := startPlatformEnv(platformOptions{store: cfg.store, bin: cfg.bin, dir: cfg.dir, pg: cfg.pg, runs: cfg.runs, gctrace: true, logFile: cfg.serverLog, maxIdle: 2 * cfg.runs})
	if err != nil {
		return nil, err
	}
	defer e.close()
	res := &waitsResult{store: cfg.store, n: cfg.n}
	ctx := context.Background()

	// The pending calls: n approval calls spread over the runs.
	began := time.Now()
	ids := make([]string, cfg.n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := range cfg.runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.n {
					return
				}
				v, err := e.invoke(ctx, "bench.approve", e.runIDs[w], map[string]any{"n": i, "note": "held"})
				if err == nil && v.Status != "pending" {
					err = fmt.Errorf("invoke answered %s/%s", v.Status, v.State)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ids[i] = v.ToolCallID
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, fmt.Errorf("creating the pending calls: %w", err)
	}
	res.createTime = time.Since(began)
	e.http.CloseIdleConnections()
	time.Sleep(5 * time.Second)
	pid := e.p.Pid()
	if res.rss0, err = procStatusKB(pid, "VmRSS"); err != nil {
		return nil, err
	}
	res.gc0 = e.gc.mark()

	// Baseline: n idle keep-alive connections (one GET /healthz each).
	addr := strings.TrimPrefix(e.p.URL, "http://")
	conns := make([]*rawConn, cfg.n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.c.Close()
			}
		}
	}()
	sem := make(chan struct{}, cfg.dialConc)
	var dialErr atomic.Value
	for i := range cfg.n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				dialErr.CompareAndSwap(nil, err)
				return
			}
			rc := &rawConn{c: c, br: bufio.NewReaderSize(c, 4096)}
			resp, _, err := rc.roundTrip("GET", "/healthz", "")
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("healthz: HTTP %d", resp.StatusCode)
			}
			if err != nil {
				c.Close()
				dialErr.CompareAndSwap(nil, err)
				return
			}
			conns[i] = rc
		}()
	}
	wg.Wait()
	if err, _ := dialErr.Load().(error); err != nil {
		return nil, fmt.Errorf("idle connections: %w", err)
	}
	time.Sleep(cfg.idle)
	if res.rssIdle, err = procStatusKB(pid, "VmRSS"); err != nil {
		return nil, err
	}
	res.gcIdle = e.gc.mark()

	// The long-polls, one per connection, re-issued whenever one times out.
	stop := make(chan struct{})
	var reissued, errs atomic.Int64
	var loops sync.WaitGroup
	began = time.Now()
	for i, rc := range conns {
		loops.Add(1)
		go func() {
			defer loops.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t := cfg.waitMS - rand.N(cfg.waitMS/5+1)
				resp, body, err := rc.roundTrip("POST", fmt.Sprintf("/v1/tool_calls/%s:wait?timeout_ms=%d", ids[i], t), e.agentKey)
				select {
				case <-stop:
					return
				default:
				}
				var v callView
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("wait: HTTP %d %s", resp.StatusCode, body)
				}
				if err == nil {
					err = json.Unmarshal(body, &v)
				}
				if err == nil && v.Status != "pending" {
					err = fmt.Errorf("wait answered %s/%s", v.Status, v.State)
				}
				if err != nil {
					if errs.Add(1) == 1 {
						res.firstErr = err.Error()
					}
					return
				}
				reissued.Add(1) // it timed out pending; the loop issues it again
			}
		}()
	}
	if _, err := awaitParked(e.waitsPending, cfg.n); err != nil {
		close(stop)
		return nil, err
	}
	res.parkTime = time.Since(began)
	parked := time.Now()
	cpu := startCPU(pid)
	for {
		rss, _ := procStatusKB(pid, "VmRSS")
		res.samples = append(res.samples, waitsSample{at: time.Since(parked), rss: rss, pending: e.waitsPending(), threads: procThreads(pid), gc: e.gc.mark()})
		if time.Since(parked) >= cfg.hold || errs.Load() > 0 {
			break
		}
		time.Sleep(cfg.every)
	}
	res.holdCPU = cpu.stop()
	res.gcHold = e.gc.mark()
	res.reissued, res.errors = reissued.Load(), errs.Load()
	close(stop)
	for _, c := range conns {
		c.c.Close()
	}
	loops.Wait()
	return res, nil
}

// gcTracker follows the platform's gctrace lines.
type gcTracker struct {
	mu  sync.Mutex
	gcs []gcEvent
}

// gcEvent is one GC as gctrace reports it (MB).
type gcEvent struct{ live, goal, stacks int64 }

var gcRE = regexp.MustCompile(`^gc \d+ .* \d+->\d+->(\d+) MB, (\d+) MB goal, (\d+) MB stacks`)

func (g *gcTracker) line(s string) {
	m := gcRE.FindStringSubmatch(s)
	if m == nil {
		return
	}
	var ev gcEvent
	ev.live, _ = strconv.ParseInt(m[1], 10, 64)
	ev.goal, _ = strconv.ParseInt(m[2], 10, 64)
	ev.stacks, _ = strconv.ParseInt(m[3], 10, 64)
	g.mu.Lock()
	g.gcs = append(g.gcs, ev)
	g.mu.Unlock()
}

// mark is the number of GCs so far and the last one.
func (g *gcTracker) mark() gcMark {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.gcs) == 0 {
		return gcMark{}
	}
	return gcMark{n: len(g.gcs), gcEvent: g.gcs[len(g.gcs)-1]}
}

// gcMark is the last GC at some moment, and how many there had been.
type gcMark struct {
	n int
	gcEvent
}

func (m gcMark) String() string {
	if m.n == 0 {
		return "no GC yet"
	}
	return fmt.Sprintf("live %d MB, stacks %d MB, goal %d MB (gc #%d)", m.live, m.stacks, m.goal, m.n)
}
