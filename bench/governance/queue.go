package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
	apserver "github.com/agentplane/agentplane/internal/server"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// queueTick is the run manager's QueueInterval: a slot freed on another
// process is filled within it.
const queueTick = 250 * time.Millisecond

func queueMain(args []string) error {
	fs := flag.NewFlagSet("queue", flag.ExitOnError)
	n := fs.Int("runs", 1000, "runs to queue")
	stores := fs.String("stores", "sqlite,postgres,postgres-2", "stores: sqlite, postgres (one process), postgres-2 (two replicas)")
	conns := fs.Int("conns", 10, "WebSocket connections the runs are started over")
	fs.Parse(args)

	dir, err := os.MkdirTemp("", "bench-queue-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := benchproc.BuildPlatform(dir)
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "queue.yaml")
	if err := os.WriteFile(cfg, []byte("limits: {max_active_runs: 1}\n"), 0o600); err != nil {
		return err
	}
	fmt.Printf("queue: %d runs queued behind one held run, limits.max_active_runs 1, each run answered at once by the agent; tick %s; load %s\n", *n, queueTick, benchproc.LoadAvg())
	for _, store := range strings.Split(*stores, ",") {
		if err := queueStore(bin, dir, store, cfg, *n, *conns); err != nil {
			return fmt.Errorf("%s: %w", store, err)
		}
	}
	return nil
}

// heldAgent answers "hold" when released and anything else at once.
type heldAgent struct {
	url     string
	release chan struct{}
	once    sync.Once
	srv     *http.Server
}

func startHeldAgent() (*heldAgent, func(key, platform string), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	a := &heldAgent{url: "http://" + ln.Addr().String(), release: make(chan struct{})}
	var mu sync.Mutex
	var h *agentplane.AgentHandler
	a.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hh := h
		mu.Unlock()
		if hh == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		hh.ServeHTTP(w, r)
	})}
	go a.srv.Serve(ln)
	set := func(key, platform string) {
		mu.Lock()
		h = &agentplane.AgentHandler{Platform: agentplane.NewClient(platform, key), Handler: func(ctx context.Context, req *agentplane.Request, st agentplane.Stream) error {
			if req.InputMessage.Content == "hold" {
				select {
				case <-a.release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return st.Delta("ok")
		}}
		mu.Unlock()
	}
	return a, set, nil
}

func queueStore(bin, dir, store, cfg string, n, nconns int) error {
	dsn := "sqlite:" + filepath.Join(dir, "queue-"+store+".db")
	replicas := 1
	if strings.HasPrefix(store, "postgres") {
		var drop func()
		var err error
		if dsn, drop, err = benchproc.PostgresSchema(benchproc.PostgresURL()); err != nil {
			return err
		}
		defer drop()
		if store == "postgres-2" {
			replicas = 2
		}
	}
	var procs []*benchproc.Proc
	for range replicas {
		p, err := benchproc.StartPlatform(bin, dsn, []string{"AGENTPLANE_CONFIG=" + cfg}, nil)
		if err != nil {
			return err
		}
		defer p.Stop(20 * time.Second)
		procs = append(procs, p)
	}
	agent, setAgent, err := startHeldAgent()
	if err != nil {
		return err
	}
	defer agent.srv.Close()
	tg := &target{proc: procs[0], http: &http.Client{}}
	if err := registerAgent(tg, agent.url, "queue-agent"); err != nil {
		return err
	}
	setAgent(tg.agentKey, procs[0].URL)

	var conns []*websocket.Conn
	for i := range nconns {
		c, _, err := websocket.DefaultDialer.Dial(procs[i%len(procs)].WSURL("/v1/ws"), nil)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey}); err != nil {
			return err
		}
		var m map[string]any
		if err := c.ReadJSON(&m); err != nil || m["type"] != "ready" {
			return fmt.Errorf("hello: %v %v", m, err)
		}
		conns = append(conns, c)
	}
	invoke := func(c *websocket.Conn, content, want string) (string, error) {
		if err := c.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": "q", "agent_id": "queue-agent", "message": map[string]any{"role": "user", "content": content}}); err != nil {
			return "", err
		}
		for {
			var m map[string]any
			if err := c.ReadJSON(&m); err != nil {
				return "", err
			}
			if m["seq"] == nil && m["type"] == "error" {
				return "", fmt.Errorf("invoke refused: %v", m)
			}
			if (want == "run_started" && m["type"] == "run_started") || (want == "QUEUED" && m["type"] == "state" && m["state"] == "QUEUED" && m["source"] == "platform") {
				id, _ := m["run_id"].(string)
				return id, nil
			}
		}
	}
	blocker, err := invoke(conns[0], "hold", "run_started")
	if err != nil {
		return err
	}
	// Each connection reads on (it follows its sessions' events) so the
	// server never blocks on a full socket; the runs are queued in order.
	enqueued := make([]string, 0, n)
	began := time.Now()
	for i := range n {
		id, err := invoke(conns[i%len(conns)], "go", "QUEUED")
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		enqueued = append(enqueued, id)
	}
	enqueueTook := time.Since(began)
	for _, c := range conns {
		go func() {
			for {
				if _, _, err := c.NextReader(); err != nil {
					return
				}
			}
		}()
	}

	st, err := apserver.OpenStore(context.Background(), dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	db := st.(interface{ SQL() *sql.DB }).SQL()

	released := time.Now()
	agent.once.Do(func() { close(agent.release) })
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var done int
		if err := db.QueryRow(`SELECT COUNT(*) FROM runs WHERE queued_at IS NOT NULL AND ended_at IS NOT NULL`).Scan(&done); err != nil {
			return err
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d queued runs ended", done, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	drained := time.Since(released)

	type row struct {
		id                     string
		started, ended, queued int64
		status                 string
	}
	var blockerEnd int64
	if err := db.QueryRow(`SELECT ended_at FROM runs WHERE run_id = '` + blocker + `'`).Scan(&blockerEnd); err != nil {
		return err
	}
	rs, err := db.Query(`SELECT run_id, started_at, ended_at, queued_at, status FROM runs WHERE queued_at IS NOT NULL ORDER BY started_at, run_id`)
	if err != nil {
		return err
	}
	var rows []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.id, &r.started, &r.ended, &r.queued, &r.status); err != nil {
			return err
		}
		rows = append(rows, r)
	}
	rs.Close()
	admitted := make([]string, len(rows))
	var waits []time.Duration
	prevEnd := blockerEnd
	failed := 0
	for i, r := range rows {
		admitted[i] = r.id
		waits = append(waits, time.Duration(r.started-prevEnd)*time.Millisecond)
		prevEnd = r.ended
		if r.status != "DONE" {
			failed++
		}
	}
	inOrder := slices.Equal(admitted, enqueued)
	p := percentiles(waits)
	fmt.Printf("\n%s (%d process(es))\n", store, replicas)
	fmt.Printf("  enqueued %d runs in %s (%.0f/s)\n", n, enqueueTook.Round(time.Millisecond), float64(n)/enqueueTook.Seconds())
	fmt.Printf("  drained the queue in %s (%.0f runs/s through one slot); %d not DONE\n", drained.Round(time.Millisecond), float64(n)/drained.Seconds(), failed)
	fmt.Printf("  admitted in enqueue order: %v\n", inOrder)
	fmt.Printf("  slot freed → next run started (server clock, ms resolution): p50 %s p90 %s p99 %s max %s ms; within one tick (%s): %v\n",
		msStr(p.p50), msStr(p.p90), msStr(p.p99), msStr(waits[len(waits)-1]), queueTick, p.p99 <= queueTick)
	if replicas > 1 {
		owners, err := db.Query(`SELECT owner, COUNT(*) FROM runs WHERE queued_at IS NOT NULL GROUP BY owner ORDER BY owner`)
		if err != nil {
			return err
		}
		var parts []string
		for owners.Next() {
			var o string
			var c int
			owners.Scan(&o, &c)
			parts = append(parts, fmt.Sprintf("%d", c))
		}
		owners.Close()
		fmt.Printf("  admitted per process: %s\n", strings.Join(parts, " / "))
	}
	if !inOrder {
		return errors.New("the queue was not admitted in order")
	}
	return nil
}

func msStr(d time.Duration) string { return fmt.Sprintf("%d", d.Milliseconds()) }

// registerAgent registers agentID at endpoint through tg's platform.
func registerAgent(tg *target, endpoint, agentID string) error {
	return tg.register(endpoint, agentID)
}
