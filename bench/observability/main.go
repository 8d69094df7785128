// Command observability measures what metrics and tracing cost (issue 11
// "Benchmark": ≤ 5 % when enabled, 0 when disabled) on the real
// `agentplane serve` binary: three processes of the same build, each on
// its own SQLite file — off (no OTEL_EXPORTER_OTLP_ENDPOINT: no exporter,
// the id-only tracer), traced (spans exported over OTLP/HTTP to an
// in-process receiver) and scraped (no tracing, GET /metrics every
// second) — are driven alike in interleaved rounds by two workloads:
//
//   - proxy: concurrent streaming chat completions through the LLM proxy
//     to the fake upstream (one span each when traced);
//   - delivery: concurrent WebSocket clients each starting runs whose agent
//     streams deltas at once (run and invoke spans when traced; every
//     delta committed and delivered).
//
// Reported per target: operations/s, latency p50/p99 and the server's CPU
// per operation, each as a ratio to "off" pooled over the rounds — or to
// "baseline", a binary built without tracing, when -baseline-bin is given
// (what "0 when disabled" is measured against).
//
//	go run ./bench/observability [-rounds 3] [-duration 8s] [-baseline-bin PATH [-baseline-traced]] [-workloads proxy,delivery]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/tracing/otlprecv"
)

type config struct {
	rounds     int
	duration   time.Duration
	proxyConc  int
	clients    int
	deltas     int
	scrapeEach time.Duration
	baseline   string
	baseTraced bool
	sampled    string
	workloads  string
}

// target is one platform process.
type target struct {
	name   string
	proc   *benchproc.Proc
	key    string // the bench agent's key
	scrape bool
}

// result pools one target's measurements of one workload.
type result struct {
	ops  int
	dur  time.Duration
	cpu  time.Duration
	lats []time.Duration
	errs int
}

// tally collects a load's outcomes from its goroutines.
type tally struct {
	mu  sync.Mutex
	res result
}

// add counts one operation: a success and its latency, or an error.
func (t *tally) add(ok bool, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ok {
		t.res.ops++
		t.res.lats = append(t.res.lats, d)
	} else {
		t.res.errs++
	}
}

func main() {
	var cfg config
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds; each measures every target once per workload, in a rotated order")
	flag.DurationVar(&cfg.duration, "duration", 8*time.Second, "measured window per target, workload and round")
	flag.IntVar(&cfg.proxyConc, "proxy-concurrency", 8, "concurrent streaming LLM calls")
	flag.IntVar(&cfg.clients, "clients", 8, "concurrent WebSocket clients starting runs one after another")
	flag.IntVar(&cfg.deltas, "deltas", 20, "deltas each run's agent streams")
	flag.DurationVar(&cfg.scrapeEach, "scrape-every", time.Second, "GET /metrics period of the scraped target")
	flag.StringVar(&cfg.baseline, "baseline-bin", "", "an agentplane binary built without tracing (e.g. from the commit before it): measured as target \"baseline\", configured as \"off\", and the reference of the ratios")
	flag.BoolVar(&cfg.baseTraced, "baseline-traced", false, "with -baseline-bin, also measure target \"base-traced\": the baseline binary exporting every span, as \"traced\" does (compares two builds' tracing)")
	flag.StringVar(&cfg.workloads, "workloads", "proxy,delivery", "the workloads to run, comma-separated")
	flag.StringVar(&cfg.sampled, "sampled", "", "also measure target \"sampled\": traced with OTEL_TRACES_SAMPLER=parentbased_traceidratio and this OTEL_TRACES_SAMPLER_ARG (e.g. 0.1)")
	flag.Parse()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go s.Serve(ln)
	return "http://" + ln.Addr().String(), func() { s.Close() }, nil
}

func run(cfg config) error {
	dir, err := os.MkdirTemp("", "bench-observability-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := benchproc.BuildPlatform(dir)
	if err != nil {
		return err
	}
	upURL, closeUp, err := listen(fakellm.New(fakellm.Options{}))
	if err != nil {
		return err
	}
	defer closeUp()
	rc := &otlprecv.Receiver{Discard: true}
	otlpURL, closeOTLP, err := listen(rc)
	if err != nil {
		return err
	}
	defer closeOTLP()
	agentURL, closeAgent, err := listen(streamAgent(cfg.deltas))
	if err != nil {
		return err
	}
	defer closeAgent()

	var targets []*target
	type spec struct {
		name, bin string
		env       []string
		scrape    bool
	}
	specs := []spec{
		{"off", bin, nil, false},
		{"traced", bin, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpURL}, false},
		{"scraped", bin, nil, true},
	}
	if cfg.sampled != "" {
		specs = append(specs, spec{"sampled", bin, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpURL, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=" + cfg.sampled}, false})
	}
	if cfg.baseline != "" {
		if cfg.baseTraced {
			specs = append(specs, spec{"base-traced", cfg.baseline, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpURL}, false})
		}
		specs = append([]spec{{"baseline", cfg.baseline, nil, false}}, specs...)
	}
	for _, t := range specs {
		env := append([]string{"AGENTPLANE_LLM_BASE_URL=" + upURL + "/v1"}, t.env...)
		p, err := benchproc.StartPlatform(t.bin, "sqlite:"+dir+"/"+t.name+".db", env, nil)
		if err != nil {
			return err
		}
		defer p.Stop(10 * time.Second)
		key, err := register(p.URL, agentURL)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		targets = append(targets, &target{name: t.name, proc: p, key: key, scrape: t.scrape})
	}

	type workload struct {
		name string
		fn   func(cfg config, t *target, stop <-chan struct{}) *result
	}
	var workloads []workload
	for _, w := range []workload{{"proxy", proxyLoad}, {"delivery", deliveryLoad}} {
		if slices.Contains(strings.Split(cfg.workloads, ","), w.name) {
			workloads = append(workloads, w)
		}
	}
	results := map[string]map[string]*result{}
	loads := []string{}
	fmt.Printf("observability overhead: %d rounds × %s per target and workload; load average %s at start\n", cfg.rounds, cfg.duration, benchproc.LoadAvg())
	for r := 0; r < cfg.rounds; r++ {
		for _, w := range workloads {
			for i := range targets {
				t := targets[(i+r)%len(targets)]
				// A short unmeasured warm-up, then the window.
				warm := make(chan struct{})
				time.AfterFunc(time.Second, func() { close(warm) })
				w.fn(cfg, t, warm)
				stop := make(chan struct{})
				var scraped atomic.Int64
				if t.scrape {
					go scrapeLoop(t.proc.URL, cfg.scrapeEach, stop, &scraped)
				}
				cpu0 := benchproc.ProcCPU(t.proc.Pid())
				began := time.Now()
				time.AfterFunc(cfg.duration, func() { close(stop) })
				res := w.fn(cfg, t, stop)
				res.dur = time.Since(began)
				res.cpu = benchproc.ProcCPU(t.proc.Pid()) - cpu0
				if results[w.name] == nil {
					results[w.name] = map[string]*result{}
				}
				pool := results[w.name][t.name]
				if pool == nil {
					pool = &result{}
					results[w.name][t.name] = pool
				}
				pool.ops += res.ops
				pool.dur += res.dur
				pool.cpu += res.cpu
				pool.errs += res.errs
				pool.lats = append(pool.lats, res.lats...)
				fmt.Printf("round %d %-8s %-8s %7.1f ops/s  p50 %6.2f ms  p99 %6.2f ms  cpu %6.0f µs/op  errors %d  load %s\n",
					r+1, w.name, t.name, float64(res.ops)/res.dur.Seconds(), ms(pct(res.lats, 50)), ms(pct(res.lats, 99)),
					float64(res.cpu.Microseconds())/float64(max(res.ops, 1)), res.errs, benchproc.LoadAvg())
			}
		}
		loads = append(loads, benchproc.LoadAvg())
	}
	spans, reqs := rc.Count()
	ref := targets[0].name
	fmt.Printf("\npooled (ratios to %s; load average after each round: %s; spans received by the OTLP receiver: %d in %d requests)\n\n", ref, strings.Join(loads, ", "), spans, reqs)
	fmt.Printf("| workload | target | ops/s | p50 ms | p99 ms | server CPU µs/op | ops/s ÷ %[1]s | p50 ÷ %[1]s | CPU/op ÷ %[1]s | errors |\n", ref)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, w := range workloads {
		off := results[w.name][ref]
		for _, t := range targets {
			res := results[w.name][t.name]
			slices.Sort(res.lats)
			fmt.Printf("| %s | %s | %.1f | %.2f | %.2f | %.0f | %.3f | %.3f | %.3f | %d |\n", w.name, t.name,
				rate(res), ms(pct(res.lats, 50)), ms(pct(res.lats, 99)), cpuPerOp(res),
				rate(res)/rate(off), float64(pct(res.lats, 50))/float64(pct(off.lats, 50)), cpuPerOp(res)/cpuPerOp(off), res.errs)
		}
	}
	return nil
}

func rate(r *result) float64     { return float64(r.ops) / r.dur.Seconds() }
func cpuPerOp(r *result) float64 { return float64(r.cpu.Microseconds()) / float64(max(r.ops, 1)) }
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(lats []time.Duration, p int) time.Duration {
	if len(lats) == 0 {
		return 0
	}
	s := slices.Clone(lats)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func register(base, agentURL string) (string, error) {
	body := fmt.Sprintf(`{"agent_id":"bench","endpoint":%q,"capabilities":["chat"]}`, agentURL)
	req, _ := http.NewRequest("POST", base+"/v1/agents/register", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+benchproc.AdminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Key string `json:"agent_api_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Key == "" {
		return "", fmt.Errorf("register: %d %v", resp.StatusCode, err)
	}
	return out.Key, nil
}

func scrapeLoop(base string, every time.Duration, stop <-chan struct{}, n *atomic.Int64) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if m := benchproc.ScrapeMetrics(base); m != nil {
				n.Add(1)
			}
		}
	}
}

// streamAgent answers /invoke with n deltas at once, then done.
func streamAgent(n int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) })
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "event: delta\ndata: {\"text\":\"word %d \"}\n\n", i)
		}
		b.WriteString("event: done\ndata: {\"usage\":{}}\n\n")
		io.WriteString(w, b.String())
	})
	return mux
}

// proxyLoad runs streaming chat completions (closed loop) until stop.
func proxyLoad(cfg config, t *target, stop <-chan struct{}) *result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	body := `{"model":"fake-gpt","stream":true,"messages":[{"role":"user","content":"tell me about tracing overhead"}]}`
	var tl tally
	var wg sync.WaitGroup
	for range cfg.proxyConc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				req, _ := http.NewRequest("POST", t.proc.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+t.key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				tl.add(ok, time.Since(start))
			}
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
	return &tl.res
}

// deliveryLoad has each client start runs one after another (a new
// session each) and wait for each run's done, until stop.
func deliveryLoad(cfg config, t *target, stop <-chan struct{}) *result {
	var tl tally
	var wg sync.WaitGroup
	for c := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ws, _, err := websocket.DefaultDialer.DialContext(ctx, t.proc.WSURL("/v1/ws"), nil)
			if err != nil {
				tl.add(false, 0)
				return
			}
			defer ws.Close()
			ws.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey})
			var m map[string]any
			if ws.ReadJSON(&m) != nil || m["type"] != "ready" {
				tl.add(false, 0)
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ws.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": fmt.Sprintf("c%d-%d", c, i), "agent_id": "bench",
					"message": map[string]any{"role": "user", "content": "go"}})
				deltas, ok := 0, false
				for {
					m = nil
					ws.SetReadDeadline(time.Now().Add(30 * time.Second))
					if err := ws.ReadJSON(&m); err != nil {
						break
					}
					if m["type"] == "delta" {
						deltas++
					}
					if m["type"] == "done" {
						ok = deltas == cfg.deltas
						break
					}
					if m["type"] == "error" {
						break
					}
				}
				tl.add(ok, time.Since(start))
				if !ok {
					return
				}
			}
		}()
	}
	wg.Wait()
	return &tl.res
}
