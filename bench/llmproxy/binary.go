package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

// The product's figure: the shipped binary, each target a process of its
// own on loopback, all in front of one fake upstream process.
//
//	reverse   a bare httputil.ReverseProxy with a tuned transport (the baseline)
//	sqlite    `agentplane serve` on its embedded SQLite store
//	postgres  `agentplane serve` on PostgreSQL
//
// Each agentplane call is authenticated with an agent key, bound to a live
// run (x-run-id), metered, priced and recorded in the event log; the run is
// held open by a real agent so the calls are as an agent's would be.

// target is one process the load is sent to.
type target struct {
	name       string
	base       string // ends in /v1
	key, runID string
	pid        int
	admin      string // the platform's URL (usage check); "" for the baseline
}

// binaryEnv is the running processes.
type binaryEnv struct {
	targets []target
	procs   []*benchproc.Proc
	agents  []*benchproc.HoldAgent
	conns   []*websocket.Conn
	cleanup []func()
}

func (e *binaryEnv) close() {
	for _, a := range e.agents {
		a.Finish()
	}
	for _, c := range e.conns {
		c.Close()
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].Stop(30 * time.Second)
	}
	for _, a := range e.agents {
		a.Close()
	}
	for _, fn := range e.cleanup {
		fn()
	}
}

// startBinaryEnv builds the binary (unless bins names some) and starts the
// upstream, the baseline and one platform per binary and store. bins are
// "path" or "label=path"; with more than one, targets are named
// store@label, so two builds are compared in the same run.
func startBinaryEnv(stores []string, bins []string) (_ *binaryEnv, err error) {
	e := &binaryEnv{}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	dir, err := os.MkdirTemp("", "llmproxy-bench-")
	if err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, func() { os.RemoveAll(dir) })
	if len(bins) == 0 {
		bin, err := benchproc.BuildPlatform(dir)
		if err != nil {
			return nil, err
		}
		bins = []string{bin}
	}
	up, err := benchproc.SelfProc("upstream", []string{"upstream"}, nil, nil)
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, up)
	rp, err := benchproc.SelfProc("reverse", []string{"reverse", "-target", up.URL}, nil, nil)
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, rp)
	e.targets = append(e.targets, target{name: "reverse", base: rp.URL + "/v1", key: "unused", runID: "unused", pid: rp.Pid()})

	cfgFile := filepath.Join(dir, "agentplane.yaml")
	cfg := "llm:\n  upstreams:\n    - name: fake\n      base_url: " + up.URL + "/v1\n      api_key: sk-bench\n" +
		"  prices:\n    fake-gpt: {input: 2.5, cached_input: 1.25, output: 10}\n"
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	for bi, spec := range bins {
		label, bin, ok := strings.Cut(spec, "=")
		if !ok {
			label, bin = fmt.Sprint(bi+1), spec
		}
		for _, st := range stores {
			var dsn string
			switch st {
			case "sqlite":
				dsn = "sqlite:" + filepath.Join(dir, fmt.Sprintf("llm-bench-%d.db", bi))
			case "postgres":
				var drop func()
				if dsn, drop, err = benchproc.PostgresSchema(benchproc.PostgresURL()); err != nil {
					return nil, err
				}
				e.cleanup = append(e.cleanup, drop)
			default:
				return nil, fmt.Errorf("unknown store %q", st)
			}
			name := st
			if len(bins) > 1 {
				name += "@" + label
			}
			t, err := e.startPlatform(name, bin, dsn, cfgFile)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			e.targets = append(e.targets, t)
		}
	}
	return e, nil
}

// startPlatform starts one agentplane, registers the agent and starts the
// run the calls are made in.
func (e *binaryEnv) startPlatform(name, bin, dsn, cfgFile string) (target, error) {
	p, err := benchproc.StartPlatform(bin, dsn, []string{"AGENTPLANE_CONFIG=" + cfgFile}, nil)
	if err != nil {
		return target{}, err
	}
	e.procs = append(e.procs, p)
	agent, err := benchproc.StartHoldAgent()
	if err != nil {
		return target{}, err
	}
	e.agents = append(e.agents, agent)

	var reg struct {
		AgentAPIKey string `json:"agent_api_key"`
	}
	body, _ := json.Marshal(map[string]any{"agent_id": "llm-bench", "name": "LLM proxy bench agent",
		"endpoint": agent.URL, "capabilities": []string{"chat"}})
	if err := postJSON(p.URL+"/v1/agents/register", benchproc.AdminKey, body, &reg); err != nil {
		return target{}, fmt.Errorf("register agent: %w", err)
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial(p.WSURL("/v1/ws"), nil)
	if err != nil {
		return target{}, fmt.Errorf("client websocket: %w", err)
	}
	e.conns = append(e.conns, ws)
	ws.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey})
	ws.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": "llm-bench",
		"message": map[string]any{"role": "user", "content": "hold this run open"}})
	go func() {
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}()
	select {
	case runID := <-agent.Runs:
		return target{name: name, base: p.URL + "/v1", key: reg.AgentAPIKey, runID: runID, pid: p.Pid(), admin: p.URL}, nil
	case <-time.After(30 * time.Second):
		return target{}, fmt.Errorf("the run did not reach the agent:\n%s", p.Tail())
	}
}

func postJSON(url, key string, body []byte, out any) error {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// recordedCalls is the number of llm_call_done events the platform has
// summed (GET /v1/usage, admin): every call must be there.
func recordedCalls(adminURL string) (int64, error) {
	req, _ := http.NewRequest(http.MethodGet, adminURL+"/v1/usage", nil)
	req.Header.Set("Authorization", "Bearer "+benchproc.AdminKey)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var u struct {
		Total struct {
			LLMCalls int64 `json:"llm_calls"`
		} `json:"total"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /v1/usage: HTTP %d", resp.StatusCode)
	}
	return u.Total.LLMCalls, json.NewDecoder(resp.Body).Decode(&u)
}

// loadShape is one way of loading a target: closed loop with a number of
// workers, or open loop at a rate.
type loadShape struct {
	workers int // closed loop when > 0
	rate    int // open loop when > 0
}

func (s loadShape) String() string {
	if s.workers > 0 {
		return fmt.Sprintf("%d closed-loop worker%s", s.workers, map[bool]string{true: "s"}[s.workers > 1])
	}
	return fmt.Sprintf("%d req/s open loop", s.rate)
}

// closedLoop runs workers that each send the next request when the last
// one has been answered, for d.
func closedLoop(t target, stream bool, workers int, d time.Duration) []sample {
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			for time.Now().Before(end) {
				mine = append(mine, oneTo(t.base, t.key, t.runID, stream, time.Now()))
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// measure loads t in shape for d and returns the samples and the CPU the
// target's process (and, for PostgreSQL, the database's processes) used.
func measure(t target, stream bool, shape loadShape, d time.Duration) (ss []sample, cpu, dbCPU time.Duration) {
	c0 := benchproc.ProcCPU(t.pid)
	pg0 := postgresCPU()
	if shape.workers > 0 {
		ss = closedLoop(t, stream, shape.workers, d)
	} else {
		ss = loadFn(func(at time.Time) sample { return oneTo(t.base, t.key, t.runID, stream, at) }, shape.rate, d).samples
	}
	cpu = benchproc.ProcCPU(t.pid) - c0
	if strings.HasPrefix(t.name, "postgres") {
		dbCPU = postgresCPU() - pg0
	}
	return ss, cpu, dbCPU
}

// postgresCPU is the CPU all processes named "postgres" have used (the
// database server's backends on this machine).
func postgresCPU() time.Duration {
	ents, _ := os.ReadDir("/proc")
	var sum time.Duration
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != "postgres" {
			continue
		}
		sum += benchproc.ProcCPU(pid)
	}
	return sum
}

// cell accumulates one target's results for one (shape, mode).
type cell struct {
	samples    []sample
	cpu, dbCPU time.Duration
}

// runBinary measures every target for every shape and mode, rounds
// interleaving the targets, and prints the tables.
func runBinary(e *binaryEnv, shapes []loadShape, modes []string, d, warmup time.Duration, rounds int) {
	fmt.Printf("Each cell: %v of load after %v unmeasured warm-up, %d rounds, targets interleaved within a round. "+
		"Latency is from sending the request to its last byte. Server CPU is the target process's user+system time "+
		"(/proc/PID/stat) over the measured period divided by the requests answered; for PostgreSQL the database's "+
		"own processes are shown apart.\n\n", d, warmup, rounds)
	type key struct {
		shape int
		mode  string
	}
	cells := map[key][]cell{}
	added := map[key][][2][]time.Duration{} // per platform target: per-round p50 and p99 differences
	sent := make([]int, len(e.targets))
	var loads []string
	for r := 0; r < rounds; r++ {
		loads = append(loads, benchproc.LoadAvg())
		for si, shape := range shapes {
			for _, mode := range modes {
				stream := mode == "stream"
				k := key{si, mode}
				if cells[k] == nil {
					cells[k] = make([]cell, len(e.targets))
					added[k] = make([][2][]time.Duration, len(e.targets))
				}
				var round []stats
				for ti, t := range e.targets {
					w, _, _ := measure(t, stream, shape, warmup)
					ss, cpu, db := measure(t, stream, shape, d)
					c := &cells[k][ti]
					c.samples = append(c.samples, ss...)
					c.cpu += cpu
					c.dbCPU += db
					sent[ti] += len(w) + len(ss)
					round = append(round, summarise(ss))
				}
				for ti := 1; ti < len(e.targets); ti++ {
					added[k][ti][0] = append(added[k][ti][0], round[ti].p50-round[0].p50)
					added[k][ti][1] = append(added[k][ti][1], round[ti].p99-round[0].p99)
				}
			}
		}
	}
	loads = append(loads, benchproc.LoadAvg())
	fmt.Printf("Load average (1 min) at the start of each round and at the end: %s.\n\n", strings.Join(loads, ", "))

	type summaryRow struct {
		shape, mode, target    string
		add50, add99           time.Duration
		cpuReq, dbReq, baseCPU time.Duration
		rps, baseRPS           float64
	}
	var summary []summaryRow
	for si, shape := range shapes {
		for _, mode := range modes {
			k := key{si, mode}
			fmt.Printf("### %s, %s\n\n", shape, map[bool]string{false: "JSON", true: "SSE (14 events)"}[mode == "stream"])
			fmt.Println("| target | requests | errors | req/s | p50 | p99 | added p50 | added p99 | server CPU/req | CPU ÷ baseline's |")
			fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
			sts := make([]stats, len(e.targets))
			base := cells[k][0]
			baseSt := summarise(base.samples)
			baseCPU := base.cpu / time.Duration(max(1, baseSt.n-baseSt.errs))
			for ti, t := range e.targets {
				c := cells[k][ti]
				st := summarise(c.samples)
				sts[ti] = st
				ok := max(1, st.n-st.errs)
				cpuReq := c.cpu / time.Duration(ok)
				rps := float64(ok) / (d.Seconds() * float64(rounds))
				a50, a99 := "—", "—"
				ratio := "1.00×"
				cpuCol := us(cpuReq)
				if ti > 0 {
					a50 = fmt.Sprintf("%s (median of rounds %s)", signedUS(st.p50-baseSt.p50), signedUS(median(added[k][ti][0])))
					a99 = fmt.Sprintf("%s (%s)", signedUS(st.p99-baseSt.p99), signedUS(median(added[k][ti][1])))
					ratio = fmt.Sprintf("%.2f×", float64(cpuReq)/float64(max(1, baseCPU)))
					if c.dbCPU > 0 {
						cpuCol += fmt.Sprintf(" + %s PostgreSQL", us(c.dbCPU/time.Duration(ok)))
					}
					summary = append(summary, summaryRow{shape.String(), mode, t.name, median(added[k][ti][0]), median(added[k][ti][1]),
						cpuReq, c.dbCPU / time.Duration(ok), baseCPU, rps, float64(max(1, baseSt.n-baseSt.errs)) / (d.Seconds() * float64(rounds))})
				}
				fmt.Printf("| %s | %d | %d | %.0f | %s | %s | %s | %s | %s | %s |\n", t.name, st.n, st.errs, rps,
					us(st.p50), us(st.p99), a50, a99, cpuCol, ratio)
			}
			fmt.Println()
		}
	}
	fmt.Println("### Summary (added latency = median over rounds of agentplane minus the bare reverse proxy in the same round)")
	fmt.Println()
	fmt.Println("| load | mode | store | added p50 | added p99 | server CPU/req | baseline CPU/req | req/s ÷ baseline's |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|")
	for _, r := range summary {
		db := ""
		if r.dbReq > 0 {
			db = " + " + us(r.dbReq) + " PG"
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s%s | %s | %.2f |\n", r.shape, r.mode, r.target, signedUS(r.add50), signedUS(r.add99),
			us(r.cpuReq), db, us(r.baseCPU), r.rps/r.baseRPS)
	}
	fmt.Println()

	// Every call was recorded (no sampling): the platform's usage total
	// counts each llm_call_done. The write is behind the call, so allow the
	// last group commit to land.
	for ti, t := range e.targets {
		if t.admin == "" {
			continue
		}
		var n int64
		var err error
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if n, err = recordedCalls(t.admin); err != nil || n >= int64(sent[ti]) {
				break
			}
		}
		if err != nil {
			fmt.Printf("%s: recorded calls unknown: %v\n", t.name, err)
			continue
		}
		fmt.Printf("%s: %d llm_call_done events recorded for %d requests sent (incl. warm-up).\n", t.name, n, sent[ti])
	}
}
