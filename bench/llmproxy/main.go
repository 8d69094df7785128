// Command llmproxy measures the latency and CPU agentplane's LLM proxy adds.
//
// The default is the product's figure: the shipped binary (`agentplane
// serve`, built from this checkout) on SQLite and on PostgreSQL, each call
// authenticated, bound to a live run, metered and recorded in the event
// log, against a bare httputil.ReverseProxy with a tuned transport in its
// own process, all in front of one fake upstream process. It measures JSON
// and SSE chat completions at 1, 4 and 16 closed-loop workers and at 1,000
// req/s open loop (requests sent on a fixed schedule whether or not earlier
// ones have finished), rounds interleaving the targets so drift hits all
// alike, and reports added p50/p99 over the baseline measured in the same
// round and the server CPU per request from /proc.
//
//	go run ./bench/llmproxy                        # binary comparison, both stores
//	go run ./bench/llmproxy -stores sqlite -rounds 1
//
// -inprocess runs the older micro-benchmark: proxy package, fake upstream
// and a stand-in recorder in one process, no database. It isolates the
// proxy's own request path; it is not the product's figure.
//
//	go run ./bench/llmproxy -inprocess                              # micro-benchmark
//	go run ./bench/llmproxy -inprocess -soak -duration 10m -rate 1000 # memory over time
package main

import (
	"flag"

	"fmt"
	"github.com/agentplane/agentplane/bench/internal/benchproc"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "upstream":
			runUpstream()
			return
		case "reverse":
			fs := flag.NewFlagSet("reverse", flag.ExitOnError)
			target := fs.String("target", "", "upstream base URL")
			fs.Parse(os.Args[2:])
			runReverse(*target)
			return
		}
	}
	var (
		inproc   = flag.Bool("inprocess", false, "run the in-process micro-benchmark (no database) instead of the binary comparison")
		stores   = flag.String("stores", "sqlite,postgres", "binary: stores to run agentplane on")
		bin      = flag.String("bin", "", "binary: agentplane binaries to measure, comma-separated, each \"path\" or \"label=path\" (default: build ./cmd/agentplane); several are measured side by side in one run")
		shapesF  = flag.String("load", "w1,w4,w16,r1000", "binary: load shapes: wN = N closed-loop workers, rN = N req/s open loop")
		rates    = flag.String("rates", "500,1000", "request rates to measure, per second")
		duration = flag.Duration("duration", 3*time.Second, "measured time per target and round (soak: total time)")
		warmup   = flag.Duration("warmup", 500*time.Millisecond, "unmeasured load before each measurement")
		rounds   = flag.Int("rounds", 0, "rounds; each round measures every target once, in turn")
		maxExt   = flag.Float64("max-external", 0.15, "redo rounds during which other processes used more CPU than this (cores); 0 keeps every round")
		modes    = flag.String("modes", "json,stream", "json (non-streaming) and/or stream")
		soak     = flag.Bool("soak", false, "soak the proxy alone and print memory over time")
		rate     = flag.Int("rate", 1000, "soak: request rate per second")
		every    = flag.Duration("every", 10*time.Second, "soak: report interval")
		cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
		memprof  = flag.String("memprofile", "", "write an allocation profile of the whole run here")
	)
	flag.Parse()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *memprof != "" {
		defer func() {
			f, err := os.Create(*memprof)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}

	if !*inproc && !*soak {
		if *duration == 3*time.Second && !isSet("duration") {
			*duration = 2 * time.Second
		}
		if *rounds == 0 {
			*rounds = 3
		}
		var shapes []loadShape
		for _, f := range strings.Split(*shapesF, ",") {
			f = strings.TrimSpace(f)
			n, err := strconv.Atoi(f[1:])
			if err != nil || n <= 0 || (f[0] != 'w' && f[0] != 'r') {
				fmt.Fprintf(os.Stderr, "bad load shape %q (wN or rN)\n", f)
				os.Exit(2)
			}
			if f[0] == 'w' {
				shapes = append(shapes, loadShape{workers: n})
			} else {
				shapes = append(shapes, loadShape{rate: n})
			}
		}
		if _, err := benchproc.RaiseNoFile(); err != nil {
			fmt.Fprintln(os.Stderr, "raise fd limit:", err)
		}
		var bins []string
		if *bin != "" {
			bins = strings.Split(*bin, ",")
		}
		env, err := startBinaryEnv(strings.Split(*stores, ","), bins)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer env.close()
		fmt.Printf("# LLM proxy on the binary — %s, %d CPUs, %s\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version())
		runBinary(env, shapes, strings.Split(*modes, ","), *duration, *warmup, *rounds)
		return
	}
	if *rounds == 0 {
		*rounds = 6
	}
	env, err := startEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer env.close()

	fmt.Printf("# llmproxy benchmark — %s, GOMAXPROCS=%d, %s/%s, %d CPUs\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if *soak {
		runSoak(env, *rate, *duration, *every)
		return
	}
	var rs []int
	for _, s := range strings.Split(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 {
			fmt.Fprintf(os.Stderr, "bad rate %q\n", s)
			return
		}
		rs = append(rs, r)
	}
	runComparison(env, rs, strings.Split(*modes, ","), *duration, *warmup, *rounds, *maxExt)
}

// isSet says whether the flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
