package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func wakeupMain(args []string) error {
	fs := flag.NewFlagSet("wakeup", flag.ExitOnError)
	var cf commonFlags
	cf.register(fs, 2)
	k := fs.Int("k", 100, "pending calls held at once, each in a run of its own with its own :wait")
	batches := fs.Int("batches", 3, "batches of k decisions per decision kind, store and round")
	gap := fs.Duration("gap", 10*time.Millisecond, "pause after each decision's wait has returned, before the next decision")
	kinds := fs.String("decisions", "approve,reject", "decisions to measure: approve (the fast tool then runs) and/or reject")
	perRun := fs.Int("per-run", 1, "pending calls per run (k/per-run runs): above 1, every call ending in a run wakes the other long-polls of that run too")
	fs.Parse(args)
	stores, err := cf.storeList()
	if err != nil {
		return err
	}
	if _, err := raiseNoFile(); err != nil {
		return err
	}
	dir, bin, err := buildTmp(cf.bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	decisions := strings.Split(*kinds, ",")

	header(fmt.Sprintf("wake-up latency — approval decision sent → the agent's pending :wait answers; %d waits held (%d per run), decided one at a time, %d batches per decision kind, store and round, %d rounds", *k, *perRun, *batches, cf.rounds))
	type key struct{ target, decision string }
	pooled := map[key]*wakeResult{}
	var order []key
	addPooled := func(r *wakeResult) {
		kk := key{r.target, r.decision}
		if pooled[kk] == nil {
			pooled[kk] = &wakeResult{target: r.target, decision: r.decision}
			order = append(order, kk)
		}
		pooled[kk].add(r)
	}
	for round := 1; round <= cf.rounds; round++ {
		// Baseline: the same long-polls against a bare net/http server whose
		// decide handler wakes the wait with a Go channel.
		bare, err := selfProc("bare-server", []string{"bare-server"}, nil, nil)
		if err != nil {
			return err
		}
		r, err := measureBareWakeup(bare.URL, bare.Pid(), *k, *batches, *gap)
		bare.Stop(5 * time.Second)
		if err != nil {
			return fmt.Errorf("bare server: %w", err)
		}
		r.print(round)
		addPooled(r)
		for _, store := range stores {
			e, err := startPlatformEnv(platformOptions{store: store, bin: bin, dir: dir, pg: cf.pg, runs: (*k + *perRun - 1) / *perRun, logFile: cf.serverLog, maxIdle: 4 * *k})
			if err != nil {
				return fmt.Errorf("%s: %w", store, err)
			}
			for _, d := range decisions {
				r, err := measureWakeup(e, d, *k, *perRun, *batches, *gap)
				if err != nil {
					e.close()
					return fmt.Errorf("%s %s: %w", store, d, err)
				}
				r.print(round)
				addPooled(r)
			}
			e.close()
		}
	}
	fmt.Println("## summary, rounds pooled (ms; wake = decide request sent → the :wait's answer received)")
	fmt.Println()
	fmt.Println("| target | decision | samples | wake p50 | wake p90 | wake p99 | wake max | wake p99 per round | decide round-trip p50 / p99 | wake p99 ÷ decide p99 | wake p99 ÷ bare p99 | p99 ≤ 50 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	var bare *wakeResult
	for _, kk := range order {
		if kk.target == "bare net/http" {
			bare = pooled[kk]
		}
	}
	for _, kk := range order {
		r := pooled[kk]
		w, d := percentiles(r.wake), percentiles(r.decide)
		var per []string
		for _, x := range r.roundP99 {
			per = append(per, ms(x))
		}
		vsBare, target := "—", "—"
		if r != bare {
			target = "met"
			if w.p99 > 50*time.Millisecond {
				target = "**missed**"
			}
			if bare != nil {
				vsBare = ratio(w.p99, percentiles(bare.wake).p99)
			}
		}
		fmt.Printf("| %s | %s | %d | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n", r.target, r.decision, w.n, ms(w.p50), ms(w.p90), ms(w.p99), ms(w.max),
			strings.Join(per, ", "), ms(d.p50), ms(d.p99), ratio(w.p99, d.p99), vsBare, target)
	}
	fmt.Println()
	return nil
}

type wakeResult struct {
	target, decision string
	wake, decide     []time.Duration
	roundP99         []time.Duration
	cpu              cpuUse
	parked           float64
	pkScans          int64 // PostgreSQL: tool_calls primary-key index scans during the decisions
}

func (r *wakeResult) add(o *wakeResult) {
	r.wake = append(r.wake, o.wake...)
	r.decide = append(r.decide, o.decide...)
	r.roundP99 = append(r.roundP99, percentiles(append([]time.Duration(nil), o.wake...)).p99)
}

func (r *wakeResult) print(round int) {
	fmt.Printf("## %s, %s, round %d\n", r.target, r.decision, round)
	fmt.Printf("wake:            %s\n", percentiles(append([]time.Duration(nil), r.wake...)))
	fmt.Printf("decide round-trip: %s\n", percentiles(append([]time.Duration(nil), r.decide...)))
	fmt.Printf("waits parked before the first decision of each batch (server's own count, min): %.0f; during the decisions: %s\n", r.parked, r.cpu)
	if r.pkScans > 0 {
		fmt.Printf("PostgreSQL counted %.1f index scans of tool_calls' primary key per decision (reads and guarded updates of a call by id)\n", float64(r.pkScans)/float64(len(r.wake)))
	}
	fmt.Println()
}

// waitOutcome is what one long-poll goroutine saw.
type waitOutcome struct {
	at   time.Time
	view *callView
	err  error
}

// measureWakeup holds k pending approval calls (one per run), each with a
// :wait, and decides them one at a time over HTTP.
func measureWakeup(e *platform, decision string, k, perRun, batches int, gap time.Duration) (*wakeResult, error) {
	res := &wakeResult{target: "agentplane " + e.store, decision: decision, parked: -1}
	ctx := context.Background()
	var cpu *cpuMeter
	var calls0 int64
	for b := range batches {
		// k pending calls, one in each run.
		views := make([]*callView, k)
		errs := make(chan error, k)
		var wg sync.WaitGroup
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := e.invoke(ctx, "bench.approve", e.runIDs[i/perRun], map[string]any{"n": i, "note": "needs approval"})
				if err == nil && (v.Status != "pending" || v.ApprovalID == "") {
					err = fmt.Errorf("invoke answered %s/%s without an approval", v.Status, v.State)
				}
				if err != nil {
					errs <- err
					return
				}
				views[i] = v
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return nil, err
		}
		// A long-poll on each.
		outcomes := make([]chan waitOutcome, k)
		for i := range k {
			outcomes[i] = make(chan waitOutcome, 1)
			go func() {
				v, err := e.wait(ctx, views[i].ToolCallID, 60*time.Second)
				outcomes[i] <- waitOutcome{time.Now(), v, err}
			}()
		}
		parked, err := awaitParked(func() float64 { return e.waitsPending() }, k)
		if err != nil {
			return nil, err
		}
		if res.parked < 0 || parked < res.parked {
			res.parked = parked
		}
		if b == 0 {
			cpu = startCPU(e.p.Pid())
			calls0 = e.tools.calls.Load()
		}
		var scans0 int64
		if e.store == "postgres" {
			time.Sleep(1500 * time.Millisecond) // let the backends flush their statistics
			scans0 = e.pkLookups()
		}
		for i := range k {
			t0 := time.Now()
			err := e.decide(ctx, views[i].ApprovalID, decision)
			t1 := time.Now()
			if err != nil {
				return nil, fmt.Errorf("decide: %w", err)
			}
			var o waitOutcome
			select {
			case o = <-outcomes[i]:
			case <-time.After(30 * time.Second):
				return nil, fmt.Errorf("the :wait of %s did not return within 30 s of the decision", views[i].ToolCallID)
			}
			if o.err != nil {
				return nil, fmt.Errorf("wait: %w", o.err)
			}
			want, code := "succeeded", ""
			if decision == "reject" {
				want, code = "failed", "rejected"
			}
			if o.view.Status != want || o.view.code() != code {
				return nil, fmt.Errorf("the :wait answered %s/%s %q after %s", o.view.Status, o.view.State, o.view.code(), decision)
			}
			res.wake = append(res.wake, o.at.Sub(t0))
			res.decide = append(res.decide, t1.Sub(t0))
			time.Sleep(gap)
		}
		if scans0 > 0 {
			time.Sleep(1500 * time.Millisecond)
			if scans1 := e.pkLookups(); scans1 > scans0 {
				res.pkScans += scans1 - scans0
			}
		}
	}
	res.cpu = cpu.stop()
	want := int64(0)
	if decision == "approve" {
		want = int64(k * batches)
	}
	if got := e.tools.calls.Load() - calls0; got != want {
		return nil, fmt.Errorf("the tool ran %d times, want %d", got, want)
	}
	return res, nil
}

// awaitParked polls count until it reaches k (the server holds every
// long-poll), then lets the machine settle briefly.
func awaitParked(count func() float64, k int) (float64, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := count()
		if n >= float64(k) {
			time.Sleep(100 * time.Millisecond)
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("only %.0f of %d long-polls parked after 60 s", n, k)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// measureBareWakeup is the same procedure against the bare server.
func measureBareWakeup(base string, pid, k, batches int, gap time.Duration) (*wakeResult, error) {
	res := &wakeResult{target: "bare net/http", decision: "wake", parked: -1}
	c := newClient(4 * k)
	ctx := context.Background()
	post := func(path string) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
		return nil
	}
	count := func() float64 {
		resp, err := c.Get(base + "/count")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		n, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		return n
	}
	var cpu *cpuMeter
	for b := range batches {
		outcomes := make([]chan waitOutcome, k)
		for i := range k {
			outcomes[i] = make(chan waitOutcome, 1)
			go func() {
				err := post(fmt.Sprintf("/wait/%d-%d?timeout_ms=60000", b, i))
				outcomes[i] <- waitOutcome{time.Now(), nil, err}
			}()
		}
		parked, err := awaitParked(count, k)
		if err != nil {
			return nil, err
		}
		if res.parked < 0 || parked < res.parked {
			res.parked = parked
		}
		if b == 0 {
			cpu = startCPU(pid)
		}
		for i := range k {
			t0 := time.Now()
			err := post(fmt.Sprintf("/decide/%d-%d", b, i))
			t1 := time.Now()
			if err != nil {
				return nil, err
			}
			o := <-outcomes[i]
			if o.err != nil {
				return nil, o.err
			}
			res.wake = append(res.wake, o.at.Sub(t0))
			res.decide = append(res.decide, t1.Sub(t0))
			time.Sleep(gap)
		}
	}
	res.cpu = cpu.stop()
	return res, nil
}

// bareServerMain is the wake-up baseline: POST /wait/{id} blocks until POST
// /decide/{id} closes the id's channel (or timeout_ms passes); GET /count
// is how many waits are parked. Plain net/http, no store, no auth.
func bareServerMain(args []string) error {
	fs := flag.NewFlagSet("bare-server", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	fs.Parse(args)
	var mu sync.Mutex
	chans := map[string]chan struct{}{}
	parked := 0
	get := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch := chans[id]
		if ch == nil {
			ch = make(chan struct{})
			chans[id] = ch
		}
		return ch
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /wait/{id}", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("timeout_ms"))
		ch := get(r.PathValue("id"))
		mu.Lock()
		parked++
		mu.Unlock()
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		state := "pending"
		select {
		case <-ch:
			state = "decided"
		case <-t.C:
		case <-r.Context().Done():
		}
		mu.Lock()
		parked--
		delete(chans, r.PathValue("id"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":%q}`, state)
	})
	mux.HandleFunc("POST /decide/{id}", func(w http.ResponseWriter, r *http.Request) {
		close(get(r.PathValue("id")))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	})
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := parked
		mu.Unlock()
		fmt.Fprintln(w, n)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("bare-server listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	return srv.Serve(ln)
}
