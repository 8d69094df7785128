package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
	"github.com/agentplane/agentplane/internal/ingress"
)

func fanoutMain(args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ExitOnError)
	var cf commonFlags
	cf.register(fs, 1)
	children := fs.Int("children", 50, "concurrent children the parent fans out")
	deltas := fs.Int("deltas", 200, "deltas each child streams")
	every := fs.Duration("every", 5*time.Millisecond, "pause between a child's deltas")
	waves := fs.Int("waves", 5, "fan-outs per platform, one after the other, each from a new parent (RSS is read after each)")
	sample := fs.Duration("sample", 50*time.Millisecond, "RSS sampling interval")
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
	header(fmt.Sprintf("fan-out — a parent run calls %d children at once (direct form, SSE), each streaming %d deltas %s apart; the session's WebSocket client and the log are checked for every event; server RSS sampled every %s; %d waves per platform, %d rounds",
		*children, *deltas, *every, *sample, *waves, cf.rounds))
	var rows []string
	for round := 1; round <= cf.rounds; round++ {
		for _, st := range stores {
			e, err := startPlatformEnv(st, bin, dir, cf.pg, cf.serverLog)
			if err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			r, err := measureFanout(e, *children, *deltas, *every, *waves, *sample)
			e.close()
			if err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			fmt.Printf("## %s, round %d\n%s\n", st, round, r.text)
			rows = append(rows, fmt.Sprintf("| %s | %d | %s |", st, round, r.row))
		}
	}
	fmt.Println("## summary")
	fmt.Println()
	fmt.Println("| store | round | per wave: wall, events logged (client-facing), all delivered | RSS idle → peak during waves → after each wave (MiB) |")
	fmt.Println("|---|---|---|---|")
	fmt.Println(strings.Join(rows, "\n"))
	fmt.Println()
	return nil
}

type fanoutResult struct {
	text, row string
}

// measureFanout runs waves fan-outs on e. Each: a new caller run (held by
// the caller agent) on a client's WebSocket; children concurrent :invoke
// (SSE) of the streamer, each read to its end by the bench as the caller
// would; then the parent ends. Checked: every child's stream carried every
// delta once, in order, and ended done; the client received exactly the
// session's client-facing events of the log (ingress.ClientMessage), seq by
// seq; the sub_agent_partial text of each child is its whole output. RSS
// is sampled throughout.
func measureFanout(e *platform, children, deltas int, every time.Duration, waves int, sampleEvery time.Duration) (*fanoutResult, error) {
	pid := e.p.Pid()
	rss := func() int64 { v, _ := benchproc.ProcStatusKB(pid, "VmRSS"); return v }
	time.Sleep(time.Second)
	idle := rss()
	var mu sync.Mutex
	peak := idle
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				v := rss()
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stop); sampler.Wait() }()

	var out strings.Builder
	var afters []string
	var walls []string
	spec, _ := json.Marshal(map[string]any{"deltas": deltas, "every_ms": every.Milliseconds()})
	want := streamText(deltas)
	c := startCPU(pid)
	for w := 1; w <= waves; w++ {
		cl, err := e.dial()
		if err != nil {
			return nil, err
		}
		// The client reads everything of the session from now on.
		type got struct {
			msgs []wsMsg
			err  error
		}
		roots, sessions, seen, err := e.holdRoots(cl, 1)
		if err != nil {
			cl.ws.Close()
			return nil, err
		}
		parent, sid := roots[0], sessions[0]
		recv := make(chan got, 1)
		go func() {
			g := got{msgs: seen}
			for {
				m, err := cl.read(2 * time.Minute)
				if err != nil {
					g.err = err
					break
				}
				g.msgs = append(g.msgs, *m)
				if m.RunID == parent && (m.Type == "done" || (m.Type == "error" && m.Seq > 0)) {
					break
				}
			}
			recv <- g
		}()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, children)
		childIDs := make([]string, children)
		for i := range children {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := e.invokeChild(ctx, parent, streamerID, string(spec))
				if err != nil {
					errs <- err
					return
				}
				defer s.close()
				childIDs[i] = s.RunID
				var text strings.Builder
				var last int64
				for {
					name, data, err := s.next()
					if err != nil {
						errs <- fmt.Errorf("child %s: %w", s.RunID, err)
						return
					}
					seq, _ := data["seq"].(float64)
					if int64(seq) <= last {
						errs <- fmt.Errorf("child %s: seq %v after %d", s.RunID, seq, last)
						return
					}
					last = int64(seq)
					switch name {
					case "delta":
						t, _ := data["text"].(string)
						text.WriteString(t)
					case "done":
						if text.String() != want || data["output"] != want {
							errs <- fmt.Errorf("child %s: streamed %d bytes, output %d bytes, want %d", s.RunID, text.Len(), len(fmt.Sprint(data["output"])), len(want))
						}
						return
					case "error":
						errs <- fmt.Errorf("child %s failed: %v", s.RunID, data)
						return
					}
				}
			}()
		}
		wg.Wait()
		wall := time.Since(t0)
		cancel()
		close(errs)
		for err := range errs {
			cl.ws.Close()
			return nil, err
		}
		// The parent ends: the agent finishes it when asked.
		e.agents.finishHeld()
		g := <-recv
		cl.ws.Close()
		if g.err != nil {
			return nil, fmt.Errorf("client: %w", g.err)
		}
		// Every client-facing event of the log, once, in order, at the client.
		lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
		evs, err := e.events(lctx, sid)
		lcancel()
		if err != nil {
			return nil, err
		}
		var wantSeqs, gotSeqs []int64
		logged := map[string]int{}
		for i := range evs {
			logged[evs[i].Type]++
			if ingress.ClientMessage(&evs[i]) != nil {
				wantSeqs = append(wantSeqs, evs[i].Seq)
			}
		}
		partials := map[string]string{}
		completes := 0
		for _, m := range g.msgs {
			if m.Seq > 0 {
				gotSeqs = append(gotSeqs, m.Seq)
			}
			switch m.Type {
			case "sub_agent_partial":
				partials[m.RunID] += m.Text
			case "sub_agent_complete":
				completes++
			}
		}
		if !slices.Equal(gotSeqs, wantSeqs) {
			return nil, fmt.Errorf("wave %d: the client got %d logged events, the log holds %d client-facing ones (first difference at %d)", w, len(gotSeqs), len(wantSeqs), firstDiff(gotSeqs, wantSeqs))
		}
		for _, id := range childIDs {
			if partials[id] != want {
				return nil, fmt.Errorf("wave %d: child %s: partials %d bytes, want %d", w, id, len(partials[id]), len(want))
			}
		}
		if completes != children || logged["agent_stream_delta"] != children*deltas+1 {
			return nil, fmt.Errorf("wave %d: %d sub_agent_complete, %d deltas logged; want %d and %d", w, completes, logged["agent_stream_delta"], children, children*deltas+1)
		}
		time.Sleep(500 * time.Millisecond)
		after := rss()
		afters = append(afters, fmt.Sprintf("%.1f", float64(after)/1024))
		walls = append(walls, fmt.Sprintf("%.2f s", wall.Seconds()))
		types := make([]string, 0, len(logged))
		for t, n := range logged {
			types = append(types, fmt.Sprintf("%s %d", t, n))
		}
		sort.Strings(types)
		fmt.Fprintf(&out, "wave %d: %d children × %d deltas in %.2f s; log: %d events (%s); client got all %d client-facing ones (%d sub_agent_partial); RSS after %.1f MiB\n",
			w, children, deltas, wall.Seconds(), len(evs), strings.Join(types, ", "), len(wantSeqs), partialCount(g.msgs), float64(after)/1024)
	}
	mu.Lock()
	pk := peak
	mu.Unlock()
	fmt.Fprintf(&out, "RSS idle %.1f MiB, peak %.1f MiB, after each wave %s MiB; %s\n", float64(idle)/1024, float64(pk)/1024, strings.Join(afters, ", "), c)
	return &fanoutResult{text: out.String(), row: fmt.Sprintf("%s; every event delivered | %.1f → %.1f → %s", strings.Join(walls, ", "), float64(idle)/1024, float64(pk)/1024, strings.Join(afters, ", "))}, nil
}

func partialCount(ms []wsMsg) int {
	n := 0
	for _, m := range ms {
		if m.Type == "sub_agent_partial" {
			n++
		}
	}
	return n
}

func firstDiff(a, b []int64) int64 {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return min(a[i], b[i])
		}
	}
	if len(a) > len(b) {
		return a[len(b)]
	}
	if len(b) > len(a) {
		return b[len(a)]
	}
	return 0
}
