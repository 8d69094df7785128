// Command llmproxy-bench measures the latency agentplane's LLM proxy adds,
// on loopback, with open-loop load: requests are sent on a fixed schedule,
// each on its own goroutine, whether or not earlier ones have finished, so
// a slow server cannot slow the load down and hide its own queueing.
// Latency is measured from the moment a request is sent to its last byte;
// how late the generator itself sent it is reported apart ("generator
// lag").
//
// In one run it compares, for each rate and for non-streaming and streaming
// chat completions:
//
//	direct     the fake upstream itself (internal/fakellm)
//	reverse    a bare httputil.ReverseProxy in front of it
//	agentplane the LLM proxy, every call metered and recorded through a
//	           batching, write-behind recorder like the real event log's
//
// and reports p50/p90/p99 and agentplane's added latency over the bare
// reverse proxy. Rounds interleave the targets so drift hits all alike, and
// a round during which other processes on the machine used more than
// -max-external cores is redone (two cores leave no room for a neighbour's
// build in the tail latencies).
//
//	go run ./bench/llmproxy                                   # the comparison
//	go run ./bench/llmproxy -soak -duration 10m -rate 1000    # memory over time
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

func main() {
	var (
		rates    = flag.String("rates", "500,1000", "request rates to measure, per second")
		duration = flag.Duration("duration", 3*time.Second, "measured time per target and round (soak: total time)")
		warmup   = flag.Duration("warmup", 500*time.Millisecond, "unmeasured load before each measurement")
		rounds   = flag.Int("rounds", 6, "rounds; each round measures every target once, in turn")
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
