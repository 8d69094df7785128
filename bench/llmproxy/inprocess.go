package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A realistic small chat request (~1 KB): a system prompt and a question.
var (
	system  = strings.Repeat("You are a helpful assistant for an operations team. Answer briefly. ", 12)
	jsonReq = []byte(`{"model":"fake-gpt","messages":[{"role":"system","content":"` + system +
		`"},{"role":"user","content":"What is the status of the nightly deployment pipeline today?"}]}`)
	streamReq = []byte(`{"model":"fake-gpt","stream":true,"messages":[{"role":"system","content":"` + system +
		`"},{"role":"user","content":"What is the status of the nightly deployment pipeline today?"}]}`)
)

// client is the load generator's HTTP client: keep-alive connections,
// with far more kept idle than the steady state needs (a few dozen).
var client = &http.Client{Transport: &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:        4096,
	MaxIdleConnsPerHost: 512,
	IdleConnTimeout:     90 * time.Second,
	DisableCompression:  true,
}}

// sample is one request's result.
type sample struct {
	total, ttfb time.Duration // from the moment the request was sent
	lag         time.Duration // how late the generator sent it
	err         bool
}

// one sends one request to the in-process targets and reads the whole answer.
func one(base string, stream bool, scheduled time.Time) sample {
	return oneTo(base, agentKey, "run-bench", stream, scheduled)
}

// oneTo sends one request with the agent key and run id and reads the whole answer.
func oneTo(base, key, runID string, stream bool, scheduled time.Time) sample {
	body := jsonReq
	if stream {
		body = streamReq
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Run-Id", runID)
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{err: true}
	}
	defer resp.Body.Close()
	var buf [4096]byte
	var s sample
	for {
		n, err := resp.Body.Read(buf[:])
		if n > 0 && s.ttfb == 0 {
			s.ttfb = time.Since(sent)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sample{err: true}
		}
	}
	s.total = time.Since(sent)
	s.lag = sent.Sub(scheduled)
	s.err = resp.StatusCode != http.StatusOK
	return s
}

// maxInFlight bounds the requests outstanding at once. Beyond it the
// generator counts a request as shed (an error) instead of opening yet
// another connection: an overloaded target then shows up as errors and
// huge percentiles, not as a file-descriptor exhaustion that takes the
// other targets down with it.
const maxInFlight = 2000

// phase is one measured load: its samples and the process CPU it took.
type phase struct {
	samples []sample
	cpu     time.Duration
}

// load sends rate requests per second to base for d, open loop, and
// returns every result.
func load(base string, stream bool, rate int, d time.Duration) phase {
	return loadFn(func(at time.Time) sample { return one(base, stream, at) }, rate, d)
}

// loadFn sends rate requests per second with send for d, open loop, and
// returns every result.
func loadFn(send func(scheduled time.Time) sample, rate int, d time.Duration) phase {
	n := int(float64(rate) * d.Seconds())
	out := make([]sample, n)
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	var inflight atomic.Int64
	cpu0 := cpuTime()
	start := time.Now()
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		if inflight.Load() >= maxInFlight {
			out[i] = sample{err: true}
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		go func(i int, at time.Time) {
			defer wg.Done()
			defer inflight.Add(-1)
			out[i] = send(at)
		}(i, at)
	}
	wg.Wait()
	return phase{samples: out, cpu: cpuTime() - cpu0}
}

// cpuTime is the user+system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stats summarises samples.
type stats struct {
	n, errs            int
	p50, p90, p99, max time.Duration
	ttfb50, ttfb99     time.Duration
	lag99              time.Duration
}

func summarise(ss []sample) stats {
	var tot, fb, lag []time.Duration
	st := stats{n: len(ss)}
	for _, s := range ss {
		if s.err {
			st.errs++
			continue
		}
		tot = append(tot, s.total)
		fb = append(fb, s.ttfb)
		lag = append(lag, s.lag)
	}
	if len(tot) == 0 {
		return st
	}
	slices.Sort(tot)
	slices.Sort(fb)
	slices.Sort(lag)
	st.p50, st.p90, st.p99, st.max = pct(tot, .50), pct(tot, .90), pct(tot, .99), tot[len(tot)-1]
	st.ttfb50, st.ttfb99 = pct(fb, .50), pct(fb, .99)
	st.lag99 = pct(lag, .99)
	return st
}

func pct(xs []time.Duration, p float64) time.Duration {
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1e3) }

func signedUS(d time.Duration) string { return fmt.Sprintf("%+.0f µs", float64(d.Nanoseconds())/1e3) }

func median(xs []time.Duration) time.Duration {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return ys[len(ys)/2]
}

// runComparison measures every target at every rate and mode.
//
// The machine may be shared (other builds and tests running), and on two
// cores any other work shows up in the tail latencies. So each round also
// measures how much CPU the rest of the machine used while it ran (all CPU
// time in /proc/stat minus this process's own); a round in which that
// exceeded maxExternal cores is thrown away and run again, up to 3×rounds
// attempts. Before each round it waits (up to a minute) for the machine to
// be quiet. How many rounds were redone is printed with each table.
func runComparison(e *env, rates []int, modes []string, d, warmup time.Duration, rounds int, maxExternal float64) {
	targets := []struct{ name, base string }{{"direct", e.upstream}, {"reverse", e.reverse}, {"agentplane", e.proxy}}
	fmt.Printf("Open-loop load (fixed send schedule, one goroutine per request), %v per target per round, "+
		"%d rounds with the targets interleaved, %v unmeasured warm-up before each. Latency is from sending "+
		"the request to its last byte. \"CPU/req\" is the whole process (load generator + fake upstream + "+
		"proxy) divided by requests, so differences between rows are the proxies' own CPU.\n\n", d, rounds, warmup)
	if maxExternal > 0 {
		fmt.Printf("Rounds during which other processes used more than %.2f cores are redone.\n\n", maxExternal)
	}
	recBefore := e.rec.calls.Load()
	var sent int
	for _, rate := range rates {
		for _, mode := range modes {
			stream := mode == "stream"
			all := make([][]sample, len(targets))
			cpu := make([]time.Duration, len(targets))
			// Per kept round: agentplane minus reverse, at p50 and p99.
			var addP50, addP99, lags []time.Duration
			var externals []float64
			kept, redone := 0, 0
			for attempt := 0; kept < rounds && attempt < 3*rounds; attempt++ {
				if maxExternal > 0 {
					waitQuiet(maxExternal, time.Minute)
				}
				var round [3]stats
				var phases [3]phase
				m0 := machineCPU()
				self0 := cpuTime()
				w0 := time.Now()
				for i, t := range targets {
					runtime.GC()
					load(t.base, stream, rate, warmup)
					phases[i] = load(t.base, stream, rate, d)
					round[i] = summarise(phases[i].samples)
					if t.name == "agentplane" {
						sent += int(float64(rate)*warmup.Seconds()) + len(phases[i].samples)
					}
				}
				external := (machineCPU() - m0 - (cpuTime() - self0)).Seconds() / time.Since(w0).Seconds()
				if maxExternal > 0 && external > maxExternal {
					redone++
					continue
				}
				kept++
				externals = append(externals, external)
				lags = append(lags, max(round[0].lag99, round[1].lag99, round[2].lag99))
				for i := range targets {
					all[i] = append(all[i], phases[i].samples...)
					cpu[i] += phases[i].cpu
				}
				addP50 = append(addP50, round[2].p50-round[1].p50)
				addP99 = append(addP99, round[2].p99-round[1].p99)
			}
			fmt.Printf("### %d req/s, %s\n\n", rate, map[bool]string{false: "non-streaming", true: "streaming (SSE, 14 events)"}[stream])
			if kept == 0 {
				fmt.Printf("(no quiet round in %d attempts: the machine was too busy to measure)\n\n", redone)
				continue
			}
			slices.Sort(lags)
			slices.Sort(externals)
			fmt.Printf("%d rounds kept, %d redone; other processes used %.2f–%.2f cores during kept rounds; "+
				"load generator lag p99 per round %s–%s.\n\n", kept, redone, externals[0], externals[len(externals)-1],
				us(lags[0]), us(lags[len(lags)-1]))
			fmt.Println("| target | requests | errors | p50 | p90 | p99 | max | first byte p50 | first byte p99 | CPU/req |")
			fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
			sts := make([]stats, len(targets))
			for i, t := range targets {
				st := summarise(all[i])
				sts[i] = st
				fmt.Printf("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", t.name, st.n, st.errs,
					us(st.p50), us(st.p90), us(st.p99), us(st.max), us(st.ttfb50), us(st.ttfb99),
					us(cpu[i]/time.Duration(max(1, st.n))))
			}
			rp, ap := sts[1], sts[2]
			fmt.Printf("\n**agentplane added over the bare reverse proxy: p50 %s, p90 %s, p99 %s** "+
				"(kept rounds pooled; median of per-round differences: p50 %s, p99 %s). "+
				"Bare reverse proxy over direct: p50 %s, p99 %s.\n\n",
				signedUS(ap.p50-rp.p50), signedUS(ap.p90-rp.p90), signedUS(ap.p99-rp.p99),
				signedUS(median(addP50)), signedUS(median(addP99)),
				signedUS(rp.p50-sts[0].p50), signedUS(rp.p99-sts[0].p99))
		}
	}
	// Every call through agentplane was recorded (write-behind, so wait for the last batch).
	time.Sleep(100 * time.Millisecond)
	fmt.Printf("Recorded llm_call_done events: %d for %d agentplane requests sent (all rounds); recorder dropped %d.\n",
		e.rec.calls.Load()-recBefore, sent, e.rec.dropped.Load())
}

// machineCPU is the CPU time all processes have used (Linux /proc/stat,
// every state but idle and iowait); 0 elsewhere.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	const userHZ = 100 // USER_HZ, the unit of /proc/stat on every Linux port
	return time.Duration(busy) * time.Second / userHZ
}

// waitQuiet waits, up to limit, for a second in which the machine used less
// than maxCores of CPU (this process is idle between rounds).
func waitQuiet(maxCores float64, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		m0, s0 := machineCPU(), cpuTime()
		time.Sleep(time.Second)
		if (machineCPU() - m0 - (cpuTime() - s0)).Seconds() < maxCores {
			return
		}
	}
}
