package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
)

// common flags of the modes.
type commonFlags struct {
	stores    string
	rounds    int
	pg        string
	serverLog string
	bin       string
}

func (c *commonFlags) register(fs *flag.FlagSet, rounds int) {
	fs.StringVar(&c.stores, "stores", "sqlite,postgres", "stores to measure, in order: sqlite, postgres")
	fs.IntVar(&c.rounds, "rounds", rounds, "rounds; each measures every store (and its baseline) in turn, so machine noise hits all alike")
	fs.StringVar(&c.pg, "postgres", postgresURL(), "PostgreSQL server (a fresh schema per platform, dropped after); default $AGENTPLANE_TEST_POSTGRES")
	fs.StringVar(&c.serverLog, "server-log", "", "append the platform's stderr (its log) to this file")
	fs.StringVar(&c.bin, "bin", "", "an agentplane binary to measure instead of building ./cmd/agentplane (A/B, or to keep its symbols for perf)")
}

func (c *commonFlags) storeList() ([]string, error) {
	var out []string
	for _, s := range strings.Split(c.stores, ",") {
		s = strings.TrimSpace(s)
		if s != "sqlite" && s != "postgres" {
			return nil, fmt.Errorf("unknown store %q", s)
		}
		out = append(out, s)
	}
	return out, nil
}

// buildTmp makes a temporary directory and builds the binary into it,
// unless prebuilt names one.
func buildTmp(prebuilt string) (dir, bin string, err error) {
	dir, err = os.MkdirTemp("", "agentplane-bench-tools-")
	if err != nil {
		return "", "", err
	}
	if prebuilt != "" {
		return dir, prebuilt, nil
	}
	bin, err = buildPlatform(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, bin, nil
}

func header(what string) {
	fmt.Printf("# %s\n# %s, %s/%s, %d CPUs, GOMAXPROCS=%d (bench), load %s\n\n", what,
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAvg())
}

func overheadMain(args []string) error {
	fs := flag.NewFlagSet("overhead", flag.ExitOnError)
	var cf commonFlags
	cf.register(fs, 2)
	n := fs.Int("n", 2000, "sequential calls per target and round")
	conc := fs.Int("concurrency", 8, "concurrent callers in the concurrent phase (each in a run of its own)")
	concN := fs.Int("conc-n", 4000, "calls per target and round in the concurrent phase")
	warm := fs.Int("warmup", 300, "unmeasured calls per target before each round (each round starts a fresh platform)")
	pprofAddr := fs.String("pprof-addr", "", "start the platform with --pprof-addr at this address and save a CPU profile of each invoke phase into -profile-dir")
	profDir := fs.String("profile-dir", ".", "where -pprof-addr's profiles go (<store>-<phase>-r<round>.pprof; read them with go tool pprof -top BINARY FILE)")
	fs.Parse(args)
	stores, err := cf.storeList()
	if err != nil {
		return err
	}
	dir, bin, err := buildTmp(cf.bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	header(fmt.Sprintf("tool call overhead — invoke → succeeded of a fast server tool, vs POSTing the tool's endpoint directly; %d sequential + %d calls from %d concurrent callers per target and round, %d rounds", *n, *concN, *conc, cf.rounds))
	type key struct{ store, phase string }
	pooled := map[key]*phaseResult{}
	var order []key
	for round := 1; round <= cf.rounds; round++ {
		for _, store := range stores {
			e, err := startPlatformEnv(platformOptions{store: store, bin: bin, dir: dir, pg: cf.pg, runs: *conc, logFile: cf.serverLog, pprof: *pprofAddr})
			if err != nil {
				return fmt.Errorf("%s: %w", store, err)
			}
			rs, err := measureOverhead(e, round, *n, *conc, *concN, *warm, *profDir)
			e.close()
			if err != nil {
				return fmt.Errorf("%s: %w", store, err)
			}
			for _, r := range rs {
				k := key{store, r.phase}
				if pooled[k] == nil {
					pooled[k] = &phaseResult{store: store, phase: r.phase}
					order = append(order, k)
				}
				pooled[k].add(r)
			}
		}
	}
	fmt.Println("## summary, rounds pooled (ms; overhead = agentplane − direct at the same percentile; ratio = agentplane ÷ direct)")
	fmt.Println()
	fmt.Println("| store | phase | calls | direct p50 / p99 | agentplane p50 / p99 | overhead p50 / p99 | ratio p50 / p99 | agentplane p99 per round | direct calls/s | agentplane calls/s | server CPU per call |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range order {
		r := pooled[k]
		b, p := percentiles(r.base), percentiles(r.plat)
		var per []string
		for _, d := range r.roundP99 {
			per = append(per, ms(d))
		}
		fmt.Printf("| %s | %s | %d | %s / %s | %s / %s | %s / %s | %s / %s | %s | %.0f | %.0f | %.0f µs |\n", r.store, r.phase, p.n,
			ms(b.p50), ms(b.p99), ms(p.p50), ms(p.p99), ms(p.p50-b.p50), ms(p.p99-b.p99), ratio(p.p50, b.p50), ratio(p.p99, b.p99),
			strings.Join(per, ", "), float64(b.n)/r.baseWall.Seconds(), float64(p.n)/r.platWall.Seconds(), r.platCPU.Seconds()*1e6/float64(p.n))
	}
	fmt.Println()
	return nil
}

type phaseResult struct {
	store, phase string
	base, plat   []time.Duration
	platWall     time.Duration
	baseWall     time.Duration
	platCPU      time.Duration // server CPU time used in the platform phase
	roundP99     []time.Duration
}

func (r *phaseResult) add(o *phaseResult) {
	r.base = append(r.base, o.base...)
	r.plat = append(r.plat, o.plat...)
	r.platWall += o.platWall
	r.baseWall += o.baseWall
	r.platCPU += o.platCPU
	r.roundP99 = append(r.roundP99, percentiles(o.plat).p99)
}

// measureOverhead runs one round on e: sequential direct, sequential
// invokes, concurrent direct, concurrent invokes.
func measureOverhead(e *platform, round, n, conc, concN, warm int, profDir string) ([]*phaseResult, error) {
	ctx := context.Background()
	var failures atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		if failures.Add(1) == 1 {
			firstErr.Store(err)
		}
	}
	args := func(i int) map[string]any { return map[string]any{"n": i, "note": "bench"} }
	// The direct call: the same endpoint, the same body and headers the
	// platform sends, through the bench's keep-alive client.
	direct := func(run string, i int) time.Duration {
		id := ids.New("tc")
		body, _ := json.Marshal(map[string]any{"tool_call_id": id, "run_id": run, "tool_name": "bench.echo", "args": args(i)})
		req, _ := http.NewRequestWithContext(ctx, "POST", e.tools.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Idempotency-Key", id)
		t0 := time.Now()
		resp, err := e.http.Do(req)
		if err != nil {
			fail(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != 200 {
			fail(fmt.Errorf("direct POST: HTTP %d", resp.StatusCode))
		}
		return d
	}
	invoke := func(run string, i int) time.Duration {
		t0 := time.Now()
		v, err := e.invoke(ctx, "bench.echo", run, args(i))
		d := time.Since(t0)
		if err != nil {
			fail(err)
		} else if v.Status != "succeeded" {
			fail(fmt.Errorf("invoke answered %s/%s %s", v.Status, v.State, v.code()))
		}
		return d
	}
	// Every round runs on a fresh platform: warm it (and the connections) up.
	for i := range warm {
		direct(e.runIDs[0], i)
		invoke(e.runIDs[i%len(e.runIDs)], i)
	}
	calls0 := e.tools.calls.Load()
	var out []*phaseResult
	seq := func(name string, fn func(string, int) time.Duration) ([]time.Duration, cpuUse) {
		m := startCPU(e.p.Pid())
		lat := make([]time.Duration, 0, n)
		for i := range n {
			lat = append(lat, fn(e.runIDs[0], i))
		}
		return lat, m.stop()
	}
	par := func(name string, fn func(string, int) time.Duration) ([]time.Duration, cpuUse) {
		m := startCPU(e.p.Pid())
		var mu sync.Mutex
		lat := make([]time.Duration, 0, concN)
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := make([]time.Duration, 0, concN/conc+1)
				for {
					i := int(next.Add(1)) - 1
					if i >= concN {
						break
					}
					mine = append(mine, fn(e.runIDs[w%len(e.runIDs)], i))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return lat, m.stop()
	}
	for _, ph := range []struct {
		name string
		run  func(string, func(string, int) time.Duration) ([]time.Duration, cpuUse)
	}{{"sequential", seq}, {fmt.Sprintf("%d concurrent", conc), par}} {
		b, bc := ph.run(ph.name, direct)
		stopProf := e.profile(filepath.Join(profDir, fmt.Sprintf("%s-%s-r%d.pprof", e.store, strings.ReplaceAll(ph.name, " ", "-"), round)))
		p, pc := ph.run(ph.name, invoke)
		stopProf()
		r := &phaseResult{store: e.store, phase: ph.name, base: b, plat: p, platWall: pc.wall, baseWall: bc.wall, platCPU: time.Duration(pc.server * float64(pc.wall))}
		bp, pp := percentiles(append([]time.Duration(nil), b...)), percentiles(append([]time.Duration(nil), p...))
		fmt.Printf("## %s, %s, round %d\n", e.store, ph.name, round)
		fmt.Printf("direct POST to the tool:   %s (%.0f calls/s)\n", bp, float64(len(b))/bc.wall.Seconds())
		fmt.Printf("agentplane invoke:         %s (%.0f calls/s)\n", pp, float64(len(p))/pc.wall.Seconds())
		fmt.Printf("overhead p50 %s ms, p99 %s ms; ratio p50 %s, p99 %s\n", ms(pp.p50-bp.p50), ms(pp.p99-bp.p99), ratio(pp.p50, bp.p50), ratio(pp.p99, bp.p99))
		if tenth := len(p) / 10; ph.name == "sequential" && tenth > 0 {
			// Does a call get slower as the run's calls accumulate?
			var ps []string
			for t := range 10 {
				ps = append(ps, ms(percentiles(append([]time.Duration(nil), p[t*tenth:(t+1)*tenth]...)).p50))
			}
			fmt.Printf("agentplane p50 per tenth of the calls, in order: %s ms\n", strings.Join(ps, ", "))
		}
		fmt.Printf("during the invokes: %s; server CPU %.0f µs per call\n\n", pc, pc.server*pc.wall.Seconds()*1e6/float64(len(p)))
		out = append(out, r)
	}
	if f := failures.Load(); f > 0 {
		return nil, fmt.Errorf("%d calls failed; first: %v\n%s", f, firstErr.Load(), e.p.Tail())
	}
	// Every call reached the tool exactly once: the direct ones and the invokes.
	want := int64(2 * (n + concN))
	if got := e.tools.calls.Load() - calls0; got != want {
		return nil, fmt.Errorf("the tool server saw %d requests in the round, want %d", got, want)
	}
	return out, nil
}
