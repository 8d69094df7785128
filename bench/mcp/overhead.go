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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
	"github.com/agentplane/agentplane/internal/ids"
)

// The four calls of a cycle, in the order each cycle makes them.
const (
	httpDirect = iota // POST to the plain HTTP tool
	httpInvoke        // that tool through agentplane
	mcpDirect         // tools/call with the go-sdk client on the bench's own session
	mcpInvoke         // the MCP tool through agentplane
	kinds
)

var kindNames = [kinds]string{"native tool, direct POST", "native tool, via agentplane", "MCP tool, direct go-sdk tools/call", "MCP tool, via agentplane"}

func overheadMain(args []string) error {
	fs := flag.NewFlagSet("overhead", flag.ExitOnError)
	stores := fs.String("stores", "sqlite,postgres", "stores to measure, in order")
	rounds := fs.Int("rounds", 2, "rounds; each measures every store in turn, on a fresh platform")
	n := fs.Int("n", 1000, "sequential cycles per store and round (a cycle is one call of each of the four kinds, interleaved so noise hits all alike)")
	conc := fs.Int("concurrency", 8, "concurrent callers in the concurrent phase (each in a run of its own)")
	concN := fs.Int("conc-n", 2000, "cycles per store and round in the concurrent phase")
	warm := fs.Int("warmup", 200, "unmeasured cycles before each round")
	pg := fs.String("postgres", benchproc.PostgresURL(), "PostgreSQL server (a fresh schema per platform, dropped after)")
	prebuilt := fs.String("bin", "", "an agentplane binary to measure instead of building ./cmd/agentplane")
	fs.Parse(args)

	dir, err := os.MkdirTemp("", "agentplane-bench-mcp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := *prebuilt
	if bin == "" {
		if bin, err = benchproc.BuildPlatform(dir); err != nil {
			return err
		}
	}
	fmt.Printf("# MCP tool call overhead — what agentplane adds to a tools/call of an MCP server's tool (invoke → succeeded, vs the go-sdk client calling the same server), and to a native server tool call for reference; %d sequential + %d concurrent (%d callers) cycles per store and round, %d rounds\n",
		*n, *concN, *conc, *rounds)
	fmt.Printf("# %s, %s/%s, %d CPUs, load %s\n\n", time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), benchproc.LoadAvg())

	type key struct{ store, phase string }
	pooled := map[key]*[kinds][]time.Duration{}
	var order []key
	for round := 1; round <= *rounds; round++ {
		for _, store := range strings.Split(*stores, ",") {
			res, err := overheadRound(strings.TrimSpace(store), bin, dir, *pg, round, *n, *conc, *concN, *warm)
			if err != nil {
				return fmt.Errorf("%s: %w", store, err)
			}
			for phase, lat := range res {
				k := key{store, phase}
				if pooled[k] == nil {
					pooled[k] = &[kinds][]time.Duration{}
					order = append(order, k)
				}
				for i := range kinds {
					pooled[k][i] = append(pooled[k][i], lat[i]...)
				}
			}
		}
	}
	fmt.Println("## summary, rounds pooled (ms; added = via agentplane − direct at the same percentile)")
	fmt.Println()
	fmt.Println("| store | phase | calls | MCP direct p50 / p99 | MCP via agentplane p50 / p99 | **MCP added p50 / p99** | native direct p50 / p99 | native via agentplane p50 / p99 | native added p50 / p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, k := range order {
		var p [kinds]pct
		for i := range kinds {
			p[i] = percentiles(pooled[k][i])
		}
		fmt.Printf("| %s | %s | %d | %s / %s | %s / %s | **%s / %s** | %s / %s | %s / %s | %s / %s |\n", k.store, k.phase, p[mcpInvoke].n,
			ms(p[mcpDirect].p50), ms(p[mcpDirect].p99), ms(p[mcpInvoke].p50), ms(p[mcpInvoke].p99),
			ms(p[mcpInvoke].p50-p[mcpDirect].p50), ms(p[mcpInvoke].p99-p[mcpDirect].p99),
			ms(p[httpDirect].p50), ms(p[httpDirect].p99), ms(p[httpInvoke].p50), ms(p[httpInvoke].p99),
			ms(p[httpInvoke].p50-p[httpDirect].p50), ms(p[httpInvoke].p99-p[httpDirect].p99))
	}
	fmt.Println()
	return nil
}

// overheadRound measures one store on a fresh platform: the sequential
// phase, then the concurrent one; latencies by phase and kind.
func overheadRound(store, bin, dir, pg string, round, n, conc, concN, warm int) (map[string]*[kinds][]time.Duration, error) {
	t, err := startTools()
	if err != nil {
		return nil, err
	}
	defer t.close()
	e, err := startPlatformEnv(store, bin, dir, pg, conc, t)
	if err != nil {
		return nil, err
	}
	defer e.close()
	ctx := context.Background()
	// The direct MCP baseline: the bench's own go-sdk session to the same
	// server, made as the platform makes its own (the same protocol version).
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: t.mcpURL, HTTPClient: newClient(64), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	// Listed first, as the platform's session has it: the SDK keeps the
	// listing and consults it on every call.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		return nil, err
	}

	var failures atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		if failures.Add(1) == 1 {
			firstErr.Store(err)
		}
	}
	args := func(i int) map[string]any { return map[string]any{"n": i, "note": "bench"} }
	call := func(kind int, run string, i int) time.Duration {
		t0 := time.Now()
		switch kind {
		case httpDirect:
			id := ids.New("tc")
			body, _ := json.Marshal(map[string]any{"tool_call_id": id, "run_id": run, "tool_name": nativeTool, "args": args(i)})
			req, _ := http.NewRequestWithContext(ctx, "POST", t.httpURL, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", id)
			resp, err := e.http.Do(req)
			if err != nil {
				fail(err)
				return 0
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		case mcpDirect:
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args(i)})
			if err != nil || res.IsError {
				fail(fmt.Errorf("direct tools/call: %v %v", res, err))
			}
		case httpInvoke, mcpInvoke:
			name := nativeTool
			if kind == mcpInvoke {
				name = mcpTool
			}
			v, err := e.invoke(ctx, name, run, args(i))
			if err != nil {
				fail(err)
			} else if v.Status != "succeeded" {
				fail(fmt.Errorf("invoke %s answered %s/%s %+v", name, v.Status, v.State, v.Error))
			}
		}
		return time.Since(t0)
	}
	cycle := func(lat *[kinds][]time.Duration, run string, i int) {
		for k := range kinds {
			lat[k] = append(lat[k], call(k, run, i))
		}
	}
	for i := range warm {
		var discard [kinds][]time.Duration
		cycle(&discard, e.runIDs[i%len(e.runIDs)], i)
	}
	mcp0, http0 := t.mcpCalls.Load(), t.httpCalls.Load()
	out := map[string]*[kinds][]time.Duration{}

	report := func(phase string, lat *[kinds][]time.Duration, wall time.Duration, cpu time.Duration) {
		fmt.Printf("## %s, %s, round %d (%s wall, server CPU %.2f cores, load %s)\n", store, phase, round, wall.Round(time.Millisecond), cpu.Seconds()/wall.Seconds(), benchproc.LoadAvg())
		var p [kinds]pct
		for k := range kinds {
			p[k] = percentiles(slices.Clone(lat[k]))
			fmt.Printf("%-36s %s\n", kindNames[k]+":", p[k])
		}
		fmt.Printf("added by agentplane: MCP p50 %s / p99 %s ms; native p50 %s / p99 %s ms\n\n",
			ms(p[mcpInvoke].p50-p[mcpDirect].p50), ms(p[mcpInvoke].p99-p[mcpDirect].p99),
			ms(p[httpInvoke].p50-p[httpDirect].p50), ms(p[httpInvoke].p99-p[httpDirect].p99))
	}

	seq := &[kinds][]time.Duration{}
	t0, cpu0 := time.Now(), benchproc.ProcCPU(e.p.Pid())
	for i := range n {
		cycle(seq, e.runIDs[0], i)
	}
	report("sequential", seq, time.Since(t0), benchproc.ProcCPU(e.p.Pid())-cpu0)
	out["sequential"] = seq

	par := &[kinds][]time.Duration{}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	t0, cpu0 = time.Now(), benchproc.ProcCPU(e.p.Pid())
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := &[kinds][]time.Duration{}
			for {
				i := int(next.Add(1)) - 1
				if i >= concN {
					break
				}
				cycle(mine, e.runIDs[w%len(e.runIDs)], i)
			}
			mu.Lock()
			for k := range kinds {
				par[k] = append(par[k], mine[k]...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	phase := strconv.Itoa(conc) + " concurrent"
	report(phase, par, time.Since(t0), benchproc.ProcCPU(e.p.Pid())-cpu0)
	out[phase] = par

	if f := failures.Load(); f > 0 {
		return nil, fmt.Errorf("%d calls failed; first: %v\n%s", f, firstErr.Load(), e.p.Tail())
	}
	// Every call reached its tool exactly once: direct and through the platform.
	if got, want := t.mcpCalls.Load()-mcp0, int64(2*(n+concN)); got != want {
		return nil, fmt.Errorf("the MCP server got %d calls, want %d", got, want)
	}
	if got, want := t.httpCalls.Load()-http0, int64(2*(n+concN)); got != want {
		return nil, fmt.Errorf("the HTTP tool got %d calls, want %d", got, want)
	}
	return out, nil
}

type pct struct {
	n                  int
	p50, p90, p99, max time.Duration
}

// percentiles of s (sorted in place), nearest rank.
func percentiles(s []time.Duration) pct {
	if len(s) == 0 {
		return pct{}
	}
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return pct{len(s), at(0.50), at(0.90), at(0.99), s[len(s)-1]}
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func (p pct) String() string {
	return fmt.Sprintf("n=%d p50 %s p90 %s p99 %s max %s ms", p.n, ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max))
}
