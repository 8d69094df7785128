package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
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

// cycleOrders is every order of a cycle's four calls. A call inherits
// the trailing work of the one before it — the platform delivering the
// previous invoke's events to the connected client, the go-sdk client's
// and server's work after a direct tools/call's answer (its stream's end,
// its garbage) — so with one fixed order the MCP invoke always followed
// the direct go-sdk call and the native invoke the direct POST, and the
// comparison measured the order as well. Cycle i takes order i mod 24:
// every call follows every other equally often, in every position.
var cycleOrders = permutations([kinds]int{httpDirect, httpInvoke, mcpDirect, mcpInvoke})

// permutations lists every order of a, starting with a itself.
func permutations(a [kinds]int) [][kinds]int {
	var out [][kinds]int
	var walk func(k int)
	walk = func(k int) {
		if k == len(a) {
			out = append(out, a)
			return
		}
		for i := k; i < len(a); i++ {
			a[k], a[i] = a[i], a[k]
			walk(k + 1)
			a[k], a[i] = a[i], a[k]
		}
	}
	walk(0)
	return out
}

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
	gogc := fs.Int("gogc", 1000, "this process's GC percent (debug.SetGCPercent). It hosts the measuring clients and the tool servers, and the go-sdk MCP server and client allocate ~0.3 MB per call: at Go's default 100 their collections run every few calls, on the same 2 CPUs as the platform, and land on whichever call is being timed — the MCP ones most, whose garbage starts them. 100 measures with the default")
	fixedOrder := fs.Bool("fixed-order", false, "make a cycle's four calls in one fixed order (native direct, native via agentplane, MCP direct, MCP via agentplane) instead of going through every order in turn; each call then always follows the same other call and inherits its trailing work (see cycleOrders)")
	jsonResponse := fs.Bool("json-response", false, "the MCP server answers a tools/call with an application/json body instead of an event stream (the default, as the go-sdk's and the TypeScript SDK's servers do)")
	prebuilt := fs.String("bin", "", "agentplane binaries to measure instead of building ./cmd/agentplane, comma-separated; with several, each round measures each store on each binary in turn (a same-run comparison of builds)")
	fs.Parse(args)

	debug.SetGCPercent(*gogc)
	dir, err := os.MkdirTemp("", "agentplane-bench-mcp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var bins []string
	for _, b := range strings.Split(*prebuilt, ",") {
		if b = strings.TrimSpace(b); b != "" {
			bins = append(bins, b)
		}
	}
	if len(bins) == 0 {
		bin, err := benchproc.BuildPlatform(dir)
		if err != nil {
			return err
		}
		bins = []string{bin}
	}
	fmt.Printf("# MCP tool call overhead — what agentplane adds to a tools/call of an MCP server's tool (invoke → succeeded, vs the go-sdk client calling the same server), and to a native server tool call for reference; %d sequential + %d concurrent (%d callers) cycles per store and round, %d rounds\n",
		*n, *concN, *conc, *rounds)
	fmt.Printf("# %s, %s/%s, %d CPUs, load %s\n", time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), benchproc.LoadAvg())
	if *jsonResponse {
		fmt.Println("# the MCP server answers with application/json bodies (-json-response)")
	}
	fmt.Printf("# the bench process (clients, tool servers) runs with GC percent %d (-gogc)\n", *gogc)
	if *fixedOrder {
		fmt.Println("# every cycle makes its calls in one fixed order (-fixed-order)")
	} else {
		fmt.Printf("# cycle i makes its calls in the order of permutation i mod %d (every order in turn)\n", len(cycleOrders))
	}
	if len(bins) > 1 {
		fmt.Printf("# builds, measured in turn within each round: %s\n", strings.Join(bins, ", "))
	}
	fmt.Println()

	type key struct{ bin, store, phase string }
	pooled := map[key]*[kinds][]time.Duration{}
	var order []key
	for round := 1; round <= *rounds; round++ {
		for _, store := range strings.Split(*stores, ",") {
			store = strings.TrimSpace(store)
			for _, bin := range bins {
				label := store
				if len(bins) > 1 {
					label = store + ", " + bin
				}
				res, err := overheadRound(store, label, bin, dir, *pg, *jsonResponse, *fixedOrder, round, *n, *conc, *concN, *warm)
				if err != nil {
					return fmt.Errorf("%s: %w", label, err)
				}
				for _, phase := range res.phases {
					k := key{bin, store, phase}
					if pooled[k] == nil {
						pooled[k] = &[kinds][]time.Duration{}
						order = append(order, k)
					}
					for i := range kinds {
						pooled[k][i] = append(pooled[k][i], res.lat[phase][i]...)
					}
				}
			}
		}
	}
	fmt.Println("## summary, rounds pooled (ms; added = via agentplane − direct at the same percentile)")
	fmt.Println()
	slices.SortStableFunc(order, func(a, b key) int { return cmp.Compare(a.store, b.store) })
	build, sep := "", ""
	if len(bins) > 1 {
		build, sep = "build | ", "---|"
	}
	fmt.Println("| " + build + "store | phase | calls | MCP direct p50 / p99 | MCP via agentplane p50 / p99 | **MCP added p50 / p99** | native direct p50 / p99 | native via agentplane p50 / p99 | native added p50 / p99 | added mean MCP / native |")
	fmt.Println("|" + sep + "---|---|---|---|---|---|---|---|---|---|")
	for _, k := range order {
		var p [kinds]pct
		for i := range kinds {
			p[i] = percentiles(pooled[k][i])
		}
		if build != "" {
			fmt.Printf("| %s ", k.bin)
		}
		fmt.Printf("| %s | %s | %d | %s / %s | %s / %s | **%s / %s** | %s / %s | %s / %s | %s / %s | %s / %s |\n", k.store, k.phase, p[mcpInvoke].n,
			ms(p[mcpDirect].p50), ms(p[mcpDirect].p99), ms(p[mcpInvoke].p50), ms(p[mcpInvoke].p99),
			ms(p[mcpInvoke].p50-p[mcpDirect].p50), ms(p[mcpInvoke].p99-p[mcpDirect].p99),
			ms(p[httpDirect].p50), ms(p[httpDirect].p99), ms(p[httpInvoke].p50), ms(p[httpInvoke].p99),
			ms(p[httpInvoke].p50-p[httpDirect].p50), ms(p[httpInvoke].p99-p[httpDirect].p99),
			ms(p[mcpInvoke].mean-p[mcpDirect].mean), ms(p[httpInvoke].mean-p[httpDirect].mean))
	}
	fmt.Println()
	return nil
}

// overheadRound measures one store on a fresh platform: the sequential
// phase, then the concurrent one; latencies by phase and kind.
func overheadRound(store, label, bin, dir, pg string, jsonResponse, fixedOrder bool, round, n, conc, concN, warm int) (*roundResult, error) {
	t, err := startTools(jsonResponse)
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
		order := cycleOrders[0]
		if !fixedOrder {
			order = cycleOrders[i%len(cycleOrders)]
		}
		for _, k := range order {
			lat[k] = append(lat[k], call(k, run, i))
		}
	}
	for i := range warm {
		var discard [kinds][]time.Duration
		cycle(&discard, e.runIDs[i%len(e.runIDs)], i)
	}
	mcp0, http0 := t.mcpCalls.Load(), t.httpCalls.Load()
	out := &roundResult{lat: map[string]*[kinds][]time.Duration{}}

	// What the MCP server saw in a phase: the requests per tools/call (one
	// POST each, both sessions, when nothing else is sent per call), the
	// connections the platform's session used, and the TCP connections
	// opened to the tool servers by every caller (the platform's native
	// tool calls and MCP session, the bench's clients).
	wireLine := func(from, to wireCount, calls int64) string {
		var platformConns, platformNew int
		for sid, n := range to.sessionConns {
			if sid != cs.ID() {
				platformConns, platformNew = n, n-from.sessionConns[sid]
			}
		}
		return fmt.Sprintf("wire: MCP server requests per tools/call %.2f; the platform's MCP session posted on %d connections (%d new); new TCP connections to the tool servers, all callers: %d",
			float64(to.mcpRequests-from.mcpRequests)/float64(max(calls, 1)), platformConns, platformNew, to.conns-from.conns)
	}
	report := func(phase string, lat *[kinds][]time.Duration, wall time.Duration, cpu time.Duration, wire string) {
		fmt.Printf("## %s, %s, round %d (%s wall, server CPU %.2f cores, load %s)\n", label, phase, round, wall.Round(time.Millisecond), cpu.Seconds()/wall.Seconds(), benchproc.LoadAvg())
		var p [kinds]pct
		for k := range kinds {
			p[k] = percentiles(slices.Clone(lat[k]))
			fmt.Printf("%-36s %s\n", kindNames[k]+":", p[k])
		}
		fmt.Println(wire)
		fmt.Printf("added by agentplane: MCP p50 %s / p99 %s / mean %s ms; native p50 %s / p99 %s / mean %s ms\n\n",
			ms(p[mcpInvoke].p50-p[mcpDirect].p50), ms(p[mcpInvoke].p99-p[mcpDirect].p99), ms(p[mcpInvoke].mean-p[mcpDirect].mean),
			ms(p[httpInvoke].p50-p[httpDirect].p50), ms(p[httpInvoke].p99-p[httpDirect].p99), ms(p[httpInvoke].mean-p[httpDirect].mean))
	}

	seq := &[kinds][]time.Duration{}
	t0, cpu0, w0, c0 := time.Now(), benchproc.ProcCPU(e.p.Pid()), t.wire(), t.mcpCalls.Load()
	for i := range n {
		cycle(seq, e.runIDs[0], i)
	}
	report("sequential", seq, time.Since(t0), benchproc.ProcCPU(e.p.Pid())-cpu0, wireLine(w0, t.wire(), t.mcpCalls.Load()-c0))
	out.add("sequential", seq)

	par := &[kinds][]time.Duration{}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	t0, cpu0, w0, c0 = time.Now(), benchproc.ProcCPU(e.p.Pid()), t.wire(), t.mcpCalls.Load()
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
	report(phase, par, time.Since(t0), benchproc.ProcCPU(e.p.Pid())-cpu0, wireLine(w0, t.wire(), t.mcpCalls.Load()-c0))
	out.add(phase, par)

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

// roundResult is one round's latencies by phase and kind, phases in the
// order measured.
type roundResult struct {
	phases []string
	lat    map[string]*[kinds][]time.Duration
}

func (r *roundResult) add(phase string, lat *[kinds][]time.Duration) {
	r.phases = append(r.phases, phase)
	r.lat[phase] = lat
}

type pct struct {
	n                  int
	p50, p90, p99, max time.Duration
	mean               time.Duration
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
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return pct{len(s), at(0.50), at(0.90), at(0.99), s[len(s)-1], sum / time.Duration(len(s))}
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func (p pct) String() string {
	return fmt.Sprintf("n=%d p50 %s p90 %s p99 %s max %s mean %s ms", p.n, ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max), ms(p.mean))
}
