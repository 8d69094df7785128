package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runSoak drives the proxy alone at rate (alternating non-streaming and
// streaming requests) for d and prints memory every interval: the heap
// must stay flat, not grow with the number of calls served.
func runSoak(e *env, rate int, d, every time.Duration) {
	fmt.Printf("Soak: agentplane only, %d req/s open loop (half streaming), %v, every call recorded.\n\n", rate, d)
	fmt.Println("| elapsed | requests | errors (shed) | p50 | p99 | heap alloc | heap in use | RSS | goroutines | recorded | other processes |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	next := start.Add(every)
	m0, s0, w0 := machineCPU(), cpuTime(), start
	var (
		mu      sync.Mutex
		window  []sample
		total   int
		errs    int
		wg      sync.WaitGroup
		i       int
		heapMin = ^uint64(0)
		heapMax uint64

		inflight atomic.Int64
		shed     int
	)
	for {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= d {
			break
		}
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		stream := i%2 == 1
		i++
		if inflight.Load() >= maxInFlight {
			mu.Lock()
			window = append(window, sample{err: true})
			shed++
			mu.Unlock()
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			s := one(e.proxy, stream, at)
			mu.Lock()
			window = append(window, s)
			mu.Unlock()
		}()
		if now := time.Now(); now.After(next) {
			next = next.Add(every)
			mu.Lock()
			w := window
			window = nil
			mu.Unlock()
			st := summarise(w)
			total += st.n
			errs += st.errs
			runtime.GC() // report live memory, not garbage awaiting collection
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heapMin, heapMax = min(heapMin, ms.HeapAlloc), max(heapMax, ms.HeapAlloc)
			mu.Lock()
			sh := shed
			mu.Unlock()
			m1, s1 := machineCPU(), cpuTime()
			others := (m1 - m0 - (s1 - s0)).Seconds() / now.Sub(w0).Seconds()
			m0, s0, w0 = m1, s1, now
			fmt.Printf("| %v | %d | %d (%d) | %s | %s | %.1f MiB | %.1f MiB | %.1f MiB | %d | %d | %.2f cores |\n",
				now.Sub(start).Round(time.Second), total, errs, sh, us(st.p50), us(st.p99),
				mib(ms.HeapAlloc), mib(ms.HeapInuse), mib(rssBytes()), runtime.NumGoroutine(), e.rec.calls.Load(), others)
		}
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	fmt.Printf("\nSent %d requests; live heap after GC ranged %.1f–%.1f MiB; recorded %d llm_call_done, dropped %d.\n",
		i, mib(heapMin), mib(heapMax), e.rec.calls.Load(), e.rec.dropped.Load())
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// rssBytes reads VmRSS from /proc (Linux); 0 elsewhere.
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
