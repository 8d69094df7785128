package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

const (
	callerID   = "bench-caller"
	leafID     = "bench-leaf"
	streamerID = "bench-streamer"
)

// --- the agents: one HTTP server, one path prefix per agent ---

// agents serves the bench's three agents (DESIGN §5 SSE):
//
//   - caller (/caller): holds each run open — one delta at once, then only
//     keep-alives — until finish; its runs are the parents the bench calls
//     children from, as the caller's own code would;
//   - leaf (/leaf): answers one delta at once, then done — the child (and
//     the root baseline) whose first delta is timed;
//   - streamer (/streamer): streams n deltas, one every `every`, then done,
//     where its message is {"deltas": n, "every_ms": ms}; each delta is
//     "<i>," so the caller and the client can check every one arrived once,
//     in order.
type agents struct {
	srv      *http.Server
	base     string
	runs     chan string // caller runs, as they are invoked
	stop     chan struct{}
	once     sync.Once
	live     atomic.Int64
	invokeCt atomic.Int64

	mu   sync.Mutex
	held map[string]chan struct{} // caller runs being held, by run id
}

func startAgents() (*agents, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &agents{base: "http://" + ln.Addr().String(), runs: make(chan string, 10000), stop: make(chan struct{}), held: map[string]chan struct{}{}}
	mux := http.NewServeMux()
	for _, p := range []string{"caller", "leaf", "streamer"} {
		mux.HandleFunc("GET /"+p+"/health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })
	}
	mux.HandleFunc("POST /caller/invoke", a.caller)
	mux.HandleFunc("POST /leaf/invoke", a.leaf)
	mux.HandleFunc("POST /streamer/invoke", a.streamer)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

func (a *agents) url(agent string) string { return a.base + "/" + agent }

type invokeBody struct {
	RunID        string `json:"run_id"`
	InputMessage struct {
		Content string `json:"content"`
	} `json:"input_message"`
}

func sseStart(w http.ResponseWriter, r *http.Request) (*invokeBody, *http.ResponseController) {
	var body invokeBody
	json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &body, http.NewResponseController(w)
}

func (a *agents) caller(w http.ResponseWriter, r *http.Request) {
	body, rc := sseStart(w, r)
	a.invokeCt.Add(1)
	io.WriteString(w, "event: delta\ndata: {\"text\":\"calling children\"}\n\n")
	rc.Flush()
	a.live.Add(1)
	defer a.live.Add(-1)
	release := make(chan struct{})
	a.mu.Lock()
	a.held[body.RunID] = release
	a.mu.Unlock()
	a.runs <- body.RunID
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-release:
			io.WriteString(w, "event: done\ndata: {\"usage\":{}}\n\n")
			rc.Flush()
			return
		case <-a.stop:
			io.WriteString(w, "event: done\ndata: {\"usage\":{}}\n\n")
			rc.Flush()
			return
		case <-r.Context().Done():
			return
		case <-t.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

func (a *agents) leaf(w http.ResponseWriter, r *http.Request) {
	_, rc := sseStart(w, r)
	a.invokeCt.Add(1)
	io.WriteString(w, "event: delta\ndata: {\"text\":\"first\"}\n\n")
	rc.Flush()
	io.WriteString(w, "event: done\ndata: {\"usage\":{}}\n\n")
	rc.Flush()
}

func (a *agents) streamer(w http.ResponseWriter, r *http.Request) {
	body, rc := sseStart(w, r)
	a.invokeCt.Add(1)
	var spec struct {
		Deltas  int `json:"deltas"`
		EveryMS int `json:"every_ms"`
	}
	json.Unmarshal([]byte(body.InputMessage.Content), &spec)
	t := time.NewTicker(time.Duration(max(spec.EveryMS, 1)) * time.Millisecond)
	defer t.Stop()
	for i := range spec.Deltas {
		fmt.Fprintf(w, "event: delta\ndata: {\"text\":\"%d,\"}\n\n", i)
		if rc.Flush() != nil {
			return
		}
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	io.WriteString(w, "event: done\ndata: {\"usage\":{}}\n\n")
	rc.Flush()
}

// streamText is what the streamer sends for n deltas.
func streamText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strconv.Itoa(i) + ",")
	}
	return b.String()
}

// finish makes every caller run send done, now and later.
func (a *agents) finish() { a.once.Do(func() { close(a.stop) }) }

// finishHeld makes the caller runs held now send done.
func (a *agents) finishHeld() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, ch := range a.held {
		close(ch)
		delete(a.held, id)
	}
}

func (a *agents) close() {
	a.finish()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.srv.Shutdown(ctx)
	a.srv.Close()
}

// --- the platform ---

type platform struct {
	store     string
	dsn       string
	p         *benchproc.Proc
	agents    *agents
	callerKey string
	http      *http.Client
	cleanup   []func()
}

type commonFlags struct {
	stores    string
	rounds    int
	pg        string
	bin       string
	serverLog string
}

func (c *commonFlags) register(fs *flag.FlagSet, rounds int) {
	fs.StringVar(&c.stores, "stores", "sqlite,postgres", "stores to measure, in order: sqlite, postgres")
	fs.IntVar(&c.rounds, "rounds", rounds, "rounds; each measures every store in turn on a fresh platform, so machine noise hits all alike")
	fs.StringVar(&c.pg, "postgres", benchproc.PostgresURL(), "PostgreSQL server (a fresh schema per platform, dropped after); default $AGENTPLANE_TEST_POSTGRES")
	fs.StringVar(&c.bin, "bin", "", "an agentplane binary to measure instead of building ./cmd/agentplane")
	fs.StringVar(&c.serverLog, "server-log", "", "append the platform's stderr (its log) to this file")
}

func (c *commonFlags) storeList() ([]string, error) {
	var out []string
	for _, s := range strings.Split(c.stores, ",") {
		if s = strings.TrimSpace(s); s != "sqlite" && s != "postgres" {
			return nil, fmt.Errorf("unknown store %q", s)
		}
		out = append(out, s)
	}
	return out, nil
}

func buildTmp(prebuilt string) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", "agentplane-bench-multiagent-"); err != nil {
		return "", "", err
	}
	if prebuilt != "" {
		return dir, prebuilt, nil
	}
	if bin, err = benchproc.BuildPlatform(dir); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, bin, nil
}

func header(what string) {
	fmt.Printf("# %s\n# %s, %s/%s, %d CPUs, GOMAXPROCS=%d (bench), load %s\n\n", what,
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), benchproc.LoadAvg())
}

// startPlatformEnv starts the binary on a fresh store of kind store and
// registers the agents (the caller linked to the two others).
func startPlatformEnv(store, bin, dir, pg, logFile string) (_ *platform, err error) {
	e := &platform{store: store}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	switch store {
	case "sqlite":
		e.dsn = "sqlite:" + filepath.Join(dir, fmt.Sprintf("bench-%d.db", time.Now().UnixNano()))
	case "postgres":
		var drop func()
		if e.dsn, drop, err = benchproc.PostgresSchema(pg); err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, drop)
	}
	var onStderr func(string)
	if logFile != "" {
		if f, ferr := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
			var mu sync.Mutex
			onStderr = func(s string) { mu.Lock(); fmt.Fprintf(f, "[%s] %s\n", store, s); mu.Unlock() }
			e.cleanup = append(e.cleanup, func() { f.Close() })
		}
	}
	if e.agents, err = startAgents(); err != nil {
		return nil, err
	}
	if e.p, err = benchproc.StartPlatform(bin, e.dsn, nil, onStderr); err != nil {
		return nil, err
	}
	e.http = &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second, DisableCompression: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, ag := range []struct {
		id, path string
		links    []string
	}{{leafID, "leaf", nil}, {streamerID, "streamer", nil}, {callerID, "caller", []string{leafID, streamerID}}} {
		var reg struct {
			AgentAPIKey string `json:"agent_api_key"`
		}
		body := map[string]any{"agent_id": ag.id, "name": ag.id, "endpoint": e.agents.url(ag.path), "linked_agents": ag.links}
		if err = e.do(ctx, "POST", "/v1/agents/register", benchproc.AdminKey, body, &reg, nil); err != nil {
			return nil, fmt.Errorf("register %s: %w", ag.id, err)
		}
		if ag.id == callerID {
			e.callerKey = reg.AgentAPIKey
		}
	}
	return e, nil
}

func (e *platform) do(ctx context.Context, method, path, key string, body, out any, hdr map[string]string) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.p.URL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// childStream is one direct-form call as the caller's code makes it.
type childStream struct {
	resp  *http.Response
	rd    *bufio.Reader
	RunID string
}

// invokeChild POSTs :invoke for agentID in parentRun, asking for SSE.
func (e *platform) invokeChild(ctx context.Context, parentRun, agentID, content string) (*childStream, error) {
	b, _ := json.Marshal(map[string]any{"message": map[string]any{"role": "user", "content": content}})
	req, err := http.NewRequestWithContext(ctx, "POST", e.p.URL+"/v1/agents/"+agentID+":invoke", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.callerKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("x-run-id", parentRun)
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf(":invoke: HTTP %d: %s", resp.StatusCode, raw)
	}
	return &childStream{resp: resp, rd: bufio.NewReader(resp.Body), RunID: resp.Header.Get("x-child-run-id")}, nil
}

// next reads one event: its name and data.
func (c *childStream) next() (string, map[string]any, error) {
	var name string
	var data map[string]any
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if name != "" {
				return name, data, nil
			}
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[len("data: "):]), &data); err != nil {
				return "", nil, err
			}
		}
	}
}

func (c *childStream) close() { c.resp.Body.Close() }

// client is a user's WebSocket connection.
type client struct {
	ws *websocket.Conn
}

func (e *platform) dial() (*client, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial(e.p.WSURL("/v1/ws"), nil)
	if err != nil {
		return nil, err
	}
	ws.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey})
	var ready struct {
		Type string `json:"type"`
	}
	if err := ws.ReadJSON(&ready); err != nil || ready.Type != "ready" {
		ws.Close()
		return nil, fmt.Errorf("hello answered %q (%v)", ready.Type, err)
	}
	return &client{ws: ws}, nil
}

// wsMsg is the part of a client message the bench reads.
type wsMsg struct {
	Type        string `json:"type"`
	Seq         int64  `json:"seq"`
	SessionID   string `json:"session_id"`
	RunID       string `json:"run_id"`
	ParentRunID string `json:"parent_run_id"`
	RequestID   string `json:"request_id"`
	Text        string `json:"text"`
	Code        string `json:"code"`
}

func (c *client) read(timeout time.Duration) (*wsMsg, error) {
	c.ws.SetReadDeadline(time.Now().Add(timeout))
	var m wsMsg
	if err := c.ws.ReadJSON(&m); err != nil {
		return nil, err
	}
	if m.Type == "error" && m.Seq == 0 {
		return nil, fmt.Errorf("error reply: %s", m.Code)
	}
	return &m, nil
}

// holdRoots starts n caller runs over c (each a session of its own) and
// returns their run and session ids once the agent holds them all, and the
// messages it read from c meanwhile.
func (e *platform) holdRoots(c *client, n int) (runs, sessions []string, seen []wsMsg, err error) {
	for i := range n {
		if err := c.ws.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": fmt.Sprintf("hold-%d", i), "agent_id": callerID,
			"message": map[string]any{"role": "user", "content": "call children"}}); err != nil {
			return nil, nil, nil, err
		}
	}
	bySession := map[string]string{}
	for len(bySession) < n {
		m, err := c.read(60 * time.Second)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("holding roots: %w", err)
		}
		seen = append(seen, *m)
		if m.Type == "run_started" && m.ParentRunID == "" {
			bySession[m.RunID] = m.SessionID
		}
	}
	for len(runs) < n {
		select {
		case id := <-e.agents.runs:
			if s, ok := bySession[id]; ok {
				runs = append(runs, id)
				sessions = append(sessions, s)
			}
		case <-time.After(60 * time.Second):
			return nil, nil, nil, errors.New("the caller agent was not invoked for every root")
		}
	}
	return runs, sessions, seen, nil
}

// events is the session's whole log (admin API), paged.
func (e *platform) events(ctx context.Context, sid string) ([]logEvent, error) {
	var all []logEvent
	after := int64(0)
	for {
		var page struct {
			Events       []logEvent `json:"events"`
			NextAfterSeq int64      `json:"next_after_seq"`
		}
		if err := e.do(ctx, "GET", fmt.Sprintf("/v1/sessions/%s/events?after_seq=%d&limit=10000", sid, after), benchproc.AdminKey, nil, &page, nil); err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 || page.NextAfterSeq <= after {
			return all, nil
		}
		after = page.NextAfterSeq
	}
}

func (e *platform) close() {
	if e.agents != nil {
		e.agents.finish()
		deadline := time.Now().Add(5 * time.Second)
		for e.agents.live.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if e.p != nil {
		e.p.Stop(30 * time.Second)
	}
	if e.agents != nil {
		e.agents.close()
	}
	for _, fn := range e.cleanup {
		fn()
	}
}

// --- statistics ---

type pct struct {
	n                        int
	p50, p90, p99, max, mean time.Duration
}

func percentiles(s []time.Duration) pct {
	if len(s) == 0 {
		return pct{}
	}
	s = slices.Clone(s)
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

// cpu measures the server's and the machine's CPU over an interval.
type cpu struct {
	pid       int
	began     time.Time
	srv, all  time.Duration
	loadStart string
}

func startCPU(pid int) *cpu {
	return &cpu{pid: pid, began: time.Now(), srv: benchproc.ProcCPU(pid), all: benchproc.MachineBusy(), loadStart: benchproc.LoadAvg()}
}

func (c *cpu) String() string {
	wall := time.Since(c.began).Seconds()
	srv := (benchproc.ProcCPU(c.pid) - c.srv).Seconds() / wall
	all := (benchproc.MachineBusy() - c.all).Seconds() / wall
	return fmt.Sprintf("CPU cores: server %.2f, everything %.2f; load %s→%s", srv, all, c.loadStart, benchproc.LoadAvg())
}
