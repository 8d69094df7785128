package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

type logEvent = store.Event

func hopMain(args []string) error {
	fs := flag.NewFlagSet("hop", flag.ExitOnError)
	var cf commonFlags
	cf.register(fs, 2)
	n := fs.Int("n", 500, "samples of each kind per store and round (a baseline and a hop, interleaved)")
	warm := fs.Int("warmup", 50, "unmeasured samples of each kind first")
	parents := fs.Int("parents", 10, "caller runs the hops are spread over (children per parent = n/parents)")
	gap := fs.Duration("gap", 5*time.Millisecond, "pause between samples")
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
	header(fmt.Sprintf("one hop — a caller's POST /v1/agents/{id}:invoke (SSE) → the child's first delta at the caller, vs a root run's agent_invoke → its first delta at a WebSocket client; the same agent answers both; %d of each per store and round, interleaved, %d rounds", *n, cf.rounds))
	type pooled struct{ base, hop []time.Duration }
	all := map[string]*pooled{}
	var rows []string
	for round := 1; round <= cf.rounds; round++ {
		for _, st := range stores {
			e, err := startPlatformEnv(st, bin, dir, cf.pg, cf.serverLog)
			if err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			base, hop, c, err := measureHop(e, *n, *warm, *parents, *gap)
			e.close()
			if err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			b, h := percentiles(base), percentiles(hop)
			fmt.Printf("## %s, round %d\n", st, round)
			fmt.Printf("root run, first delta at a WebSocket client: %s\n", b)
			fmt.Printf("child run, first delta at its caller (SSE):  %s\n", h)
			fmt.Printf("added by the hop: p50 %s ms, p99 %s ms; %s\n\n", ms(h.p50-b.p50), ms(h.p99-b.p99), c)
			rows = append(rows, fmt.Sprintf("| %s | %d | %s / %s | %s / %s | %s / %s |", st, round, ms(b.p50), ms(b.p99), ms(h.p50), ms(h.p99), ms(h.p50-b.p50), ms(h.p99-b.p99)))
			if all[st] == nil {
				all[st] = &pooled{}
			}
			all[st].base = append(all[st].base, base...)
			all[st].hop = append(all[st].hop, hop...)
		}
	}
	fmt.Println("## summary (ms; added = child − root at the same percentile; targets: added p50 ≤ 2, p99 ≤ 10 on SQLite)")
	fmt.Println()
	fmt.Println("| store | round | root first delta p50 / p99 | child first delta p50 / p99 | added p50 / p99 |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Println(strings.Join(rows, "\n"))
	for _, st := range stores {
		b, h := percentiles(all[st].base), percentiles(all[st].hop)
		fmt.Printf("| %s | pooled | %s / %s | %s / %s | %s / %s |\n", st, ms(b.p50), ms(b.p99), ms(h.p50), ms(h.p99), ms(h.p50-b.p50), ms(h.p99-b.p99))
	}
	fmt.Println()
	return nil
}

// measureHop takes n samples of each kind on e, alternating which goes
// first. A baseline sample: a WebSocket client sends agent_invoke for the
// leaf agent in a new session and waits for the run's first delta. A hop:
// the caller, in one of its live runs, POSTs :invoke for the same leaf agent
// with Accept: text/event-stream and waits for the child's first delta. Both
// are read to their end before the next sample.
func measureHop(e *platform, n, warm, parents int, gap time.Duration) (base, hop []time.Duration, usage string, err error) {
	holder, err := e.dial()
	if err != nil {
		return nil, nil, "", err
	}
	defer holder.ws.Close()
	roots, _, _, err := e.holdRoots(holder, parents)
	if err != nil {
		return nil, nil, "", err
	}
	// The holder's sessions get the children's sub_agent_* events: drain them.
	go func() {
		for {
			if _, err := holder.read(time.Hour); err != nil {
				return
			}
		}
	}()
	user, err := e.dial()
	if err != nil {
		return nil, nil, "", err
	}
	defer user.ws.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	rootSample := func(i int) (time.Duration, error) {
		req := fmt.Sprintf("b%d", i)
		t0 := time.Now()
		if err := user.ws.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": req, "agent_id": leafID,
			"message": map[string]any{"role": "user", "content": "hi"}}); err != nil {
			return 0, err
		}
		var first time.Duration
		run := ""
		for {
			m, err := user.read(30 * time.Second)
			if err != nil {
				return 0, err
			}
			if m.Type == "run_started" && m.RequestID == req {
				run = m.RunID
			}
			if run == "" || m.RunID != run {
				continue
			}
			if m.Type == "delta" && first == 0 {
				first = time.Since(t0)
			}
			if m.Type == "done" {
				return first, nil
			}
			if m.Type == "error" {
				return 0, fmt.Errorf("root run failed: %s", m.Code)
			}
		}
	}
	hopSample := func(i int) (time.Duration, error) {
		t0 := time.Now()
		s, err := e.invokeChild(ctx, roots[i%len(roots)], leafID, "hi")
		if err != nil {
			return 0, err
		}
		defer s.close()
		var first time.Duration
		for {
			name, _, err := s.next()
			if err != nil {
				return 0, fmt.Errorf("child stream: %w", err)
			}
			if name == "delta" && first == 0 {
				first = time.Since(t0)
			}
			if name == "done" {
				return first, nil
			}
			if name == "error" {
				return 0, fmt.Errorf("child failed")
			}
		}
	}
	for i := range warm {
		if _, err := rootSample(-1 - i); err != nil {
			return nil, nil, "", err
		}
		if _, err := hopSample(i); err != nil {
			return nil, nil, "", err
		}
	}
	c := startCPU(e.p.Pid())
	for i := range n {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, isRoot := range order {
			var d time.Duration
			if isRoot {
				d, err = rootSample(i)
				base = append(base, d)
			} else {
				d, err = hopSample(warm + i)
				hop = append(hop, d)
			}
			if err != nil {
				return nil, nil, "", err
			}
			time.Sleep(gap)
		}
	}
	return base, hop, c.String(), nil
}
