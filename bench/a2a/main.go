// Command a2a measures what agentplane adds to an A2A round trip (issue
// 10), on loopback, against the real `agentplane serve` binary running as
// its own process on SQLite and on PostgreSQL:
//
//	go run ./bench/a2a [flags]
//
// A small A2A agent (github.com/a2aproject/a2a-go/v2's server) runs in this
// process. It is registered with agentplane as a remote agent
// (protocol "a2a", by its card URL) and served again by agentplane
// (a2a: true). Each cycle, in the same run, sends one message with the
// a2a-go client to the agent directly and one to agentplane's
// /a2a/{agent_id}, both blocking sends answered by the completed task: the
// second goes client → agentplane's A2A server → a run → agentplane's A2A
// client → the same agent, with everything recorded in the log. The two
// are interleaved so the machine's noise hits both alike; the added
// latency is via − direct at each percentile.
//
// For the reading, each cycle also times a native run of the same shape
// — a WebSocket agent_invoke to an agentplane-protocol SSE agent answering
// "pong", until its done arrives — the same durable lifecycle (start,
// output, end committed) with no A2A on either side.
package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

const (
	agentID  = "bench-a2a"
	nativeID = "bench-native"
)

// kinds of round trip per cycle.
const (
	kDirect = iota // a2a-go client → the agent
	kVia           // a2a-go client → agentplane → the agent
	kNative        // WebSocket → agentplane → an SSE agent (no A2A)
	nKinds
)

func main() {
	fs := flag.NewFlagSet("a2a", flag.ExitOnError)
	stores := fs.String("stores", "sqlite,postgres", "stores to measure, in order")
	rounds := fs.Int("rounds", 2, "rounds; each measures every store in turn, on a fresh platform")
	n := fs.Int("n", 1000, "cycles per store and round (a cycle is one direct round trip and one through agentplane)")
	warm := fs.Int("warmup", 100, "unmeasured cycles before each round")
	pg := fs.String("postgres", benchproc.PostgresURL(), "PostgreSQL server (a fresh schema per platform, dropped after)")
	prebuilt := fs.String("bin", "", "an agentplane binary to measure instead of building ./cmd/agentplane")
	fixedOrder := fs.Bool("fixed-order", false, "make a cycle's three round trips in one fixed order (direct, via agentplane, native run) instead of going through every order in turn; the via round trip then always follows the direct one and inherits its trailing work in this process")
	gogc := fs.Int("gogc", 1000, "this process's GC percent (debug.SetGCPercent): it hosts the measuring clients and the local a2a-go agent, whose collections otherwise land on whichever round trip is being timed, on the platform's CPUs; 100 measures with Go's default")
	fs.Parse(os.Args[1:])
	debug.SetGCPercent(*gogc)
	h := harness{fixedOrder: *fixedOrder, gogc: *gogc}
	if err := run(*stores, *rounds, *n, *warm, *pg, *prebuilt, h); err != nil {
		fmt.Fprintln(os.Stderr, "a2a:", err)
		os.Exit(1)
	}
}

// harness is how the round trips are made (bench/mcp explains both
// settings: its RESULTS.md, "Cycle order, the bench's own GC").
type harness struct {
	fixedOrder bool
	gogc       int
}

// cycleOrders is every order of a cycle's round trips, the fixed one
// first; cycle i takes order i mod 6, so each follows each other equally
// often.
var cycleOrders = [][nKinds]int{
	{kDirect, kVia, kNative}, {kDirect, kNative, kVia}, {kVia, kDirect, kNative},
	{kVia, kNative, kDirect}, {kNative, kDirect, kVia}, {kNative, kVia, kDirect},
}

func run(stores string, rounds, n, warm int, pg, prebuilt string, h harness) error {
	dir, err := os.MkdirTemp("", "agentplane-bench-a2a-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := prebuilt
	if bin == "" {
		if bin, err = benchproc.BuildPlatform(dir); err != nil {
			return err
		}
	}
	agent, err := startAgent()
	if err != nil {
		return err
	}
	defer agent.Close()
	fmt.Printf("# A2A round trip through agentplane — a blocking SendMessage answered by the completed task, sent to a local a2a-go agent directly and through agentplane's /a2a/%s (which runs the agent as a remote A2A agent), interleaved; %d cycles per store and round, %d rounds\n",
		agentID, n, rounds)
	fmt.Printf("# %s, %s/%s, %d CPUs, load %s\n", time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), benchproc.LoadAvg())
	if h.fixedOrder {
		fmt.Print("# every cycle in one fixed order: direct, via agentplane, native run (-fixed-order)")
	} else {
		fmt.Printf("# cycle i in the order of permutation i mod %d (every order in turn)", len(cycleOrders))
	}
	fmt.Printf("; this process at GC percent %d (-gogc)\n\n", h.gogc)
	pooled := map[string]*[nKinds][]time.Duration{}
	var order []string
	for round := 1; round <= rounds; round++ {
		for _, store := range strings.Split(stores, ",") {
			store = strings.TrimSpace(store)
			lat, err := measure(store, bin, dir, pg, agent, round, n, warm, h)
			if err != nil {
				return fmt.Errorf("%s: %w", store, err)
			}
			if pooled[store] == nil {
				pooled[store] = &[nKinds][]time.Duration{}
				order = append(order, store)
			}
			for k := range nKinds {
				pooled[store][k] = append(pooled[store][k], lat[k]...)
			}
		}
	}
	fmt.Println("## summary, rounds pooled (ms; added = via agentplane − direct at the same percentile)")
	fmt.Println()
	printHeader()
	for _, store := range order {
		printRow(store, "pooled", pooled[store])
	}
	fmt.Println()
	return nil
}

// measure runs one round on a fresh platform: direct and via latencies.
func measure(store, bin, dir, pg string, agent *localAgent, round, n, warm int, h harness) ([nKinds][]time.Duration, error) {
	var lat [nKinds][]time.Duration
	var dsn string
	switch store {
	case "sqlite":
		dsn = fmt.Sprintf("sqlite:%s/bench-%d.db", dir, time.Now().UnixNano())
	case "postgres":
		d, drop, err := benchproc.PostgresSchema(pg)
		if err != nil {
			return lat, err
		}
		defer drop()
		dsn = d
	default:
		return lat, fmt.Errorf("unknown store %q", store)
	}
	p, err := benchproc.StartPlatform(bin, dsn, nil, nil)
	if err != nil {
		return lat, err
	}
	defer p.Stop(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}}
	// Register the local agent as a remote A2A agent, served over A2A too.
	reg := `{"agent_id":"` + agentID + `","protocol":"a2a","a2a":true,"endpoint":"` + agent.URL + `/.well-known/agent-card.json"}`
	native := `{"agent_id":"` + nativeID + `","endpoint":"` + agent.Native + `"}`
	for _, body := range []string{reg, native} {
		req, _ := http.NewRequestWithContext(ctx, "POST", p.URL+"/v1/agents/register", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+benchproc.AdminKey)
		resp, err := hc.Do(req)
		if err != nil {
			return lat, err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return lat, fmt.Errorf("register: HTTP %d", resp.StatusCode)
		}
	}
	ws, _, err := (&websocket.Dialer{HandshakeTimeout: 10 * time.Second}).Dial(p.WSURL("/v1/ws"), nil)
	if err != nil {
		return lat, err
	}
	defer ws.Close()
	ws.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey})
	var m map[string]any
	if err := ws.ReadJSON(&m); err != nil || m["type"] != "ready" {
		return lat, fmt.Errorf("hello: %v %v", m, err)
	}
	sessionID := ""
	nativeRun := func() (time.Duration, error) {
		inv := map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": nativeID, "message": map[string]any{"role": "user", "content": "ping"}}
		if sessionID != "" {
			inv["session_id"] = sessionID
		}
		start := time.Now()
		if err := ws.WriteJSON(inv); err != nil {
			return 0, err
		}
		for {
			var m map[string]any
			if err := ws.ReadJSON(&m); err != nil {
				return 0, err
			}
			switch m["type"] {
			case "done":
				sessionID, _ = m["session_id"].(string)
				return time.Since(start), nil
			case "error":
				return 0, fmt.Errorf("native run: %v", m)
			}
		}
	}
	direct, err := dial(ctx, hc, agent.URL, "")
	if err != nil {
		return lat, fmt.Errorf("direct client: %w", err)
	}
	defer direct.Destroy()
	via, err := dial(ctx, hc, p.URL+"/a2a/"+agentID, benchproc.UserKey)
	if err != nil {
		return lat, fmt.Errorf("client of agentplane: %w", err)
	}
	defer via.Destroy()

	// One context (session) for the run, a new task each message, as a
	// client in a conversation would.
	contextID := ""
	send := func(c *a2aclient.Client, ctxID string) (time.Duration, string, error) {
		m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("ping"))
		m.ContextID = ctxID
		start := time.Now()
		res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: m})
		d := time.Since(start)
		if err != nil {
			return d, "", err
		}
		t, ok := res.(*a2a.Task)
		if !ok || t.Status.State != a2a.TaskStateCompleted || len(t.Artifacts) == 0 {
			return d, "", fmt.Errorf("unexpected answer %#v", res)
		}
		return d, t.ContextID, nil
	}
	for i := range warm + n {
		order := cycleOrders[0]
		if !h.fixedOrder {
			order = cycleOrders[i%len(cycleOrders)]
		}
		for _, k := range order {
			var d time.Duration
			var err error
			switch k {
			case kDirect:
				if d, _, err = send(direct, ""); err != nil {
					return lat, fmt.Errorf("direct: %w", err)
				}
			case kVia:
				var cid string
				if d, cid, err = send(via, contextID); err != nil {
					return lat, fmt.Errorf("via agentplane: %w\n%s", err, p.Tail())
				}
				contextID = cid
			case kNative:
				if d, err = nativeRun(); err != nil {
					return lat, err
				}
			}
			if i >= warm {
				lat[k] = append(lat[k], d)
			}
		}
	}
	cpu := benchproc.ProcCPU(p.Pid()).Round(time.Millisecond)
	// For the reading: how many commits of the event log each kind of
	// round trip waits for or causes (its own, measured alone).
	const probe = 100
	perTrip := func(trip func() error) (float64, error) {
		before := commits(p.URL)
		for range probe {
			if err := trip(); err != nil {
				return 0, err
			}
		}
		return (commits(p.URL) - before) / probe, nil
	}
	viaCommits, err := perTrip(func() error {
		_, cid, err := send(via, contextID)
		contextID = cid
		return err
	})
	if err != nil {
		return lat, err
	}
	nativeCommits, err := perTrip(func() error { _, err := nativeRun(); return err })
	if err != nil {
		return lat, err
	}
	fmt.Printf("## %s, round %d (server CPU %s, load %s; event-log commits per round trip: via A2A %.2f, native run %.2f)\n\n",
		store, round, cpu, benchproc.LoadAvg(), viaCommits, nativeCommits)
	printHeader()
	printRow(store, fmt.Sprint(round), &lat)
	fmt.Println()
	return lat, nil
}

// commits is the event log's count of committed transactions so far.
func commits(base string) float64 {
	return benchproc.ScrapeMetrics(base)["agentplane_event_commits_total"]
}

// dial resolves the card at base and returns a v1.0 client sending key.
func dial(ctx context.Context, hc *http.Client, base, key string) (*a2aclient.Client, error) {
	card, err := (&agentcard.Resolver{Client: hc, CardParser: a2av0.NewAgentCardParser()}).Resolve(ctx, base)
	if err != nil {
		return nil, err
	}
	opts := []a2aclient.FactoryOption{a2aclient.WithJSONRPCTransport(hc)}
	if key != "" {
		opts = append(opts, a2aclient.WithCallInterceptors(bearer{key: key}))
	}
	return a2aclient.NewFromCard(ctx, card, opts...)
}

type bearer struct {
	a2aclient.PassthroughInterceptor
	key string
}

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, any, error) {
	req.ServiceParams["Authorization"] = []string{"Bearer " + b.key}
	return ctx, nil, nil
}

// --- the local A2A agent: one task, one artifact, completed ---

type localAgent struct {
	URL    string // the A2A agent's base URL
	Native string // the same answer as an agentplane-protocol SSE agent
	srv    *http.Server
}

type pong struct{}

func (pong) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewArtifactEvent(ec, a2a.NewTextPart("pong")), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (pong) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

func startAgent() (*localAgent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &localAgent{URL: "http://" + ln.Addr().String() + "/a2a", Native: "http://" + ln.Addr().String() + "/native"}
	card := &a2a.AgentCard{Name: "pong", Description: "answers pong", Version: "1",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(a.URL, a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "pong", Name: "pong", Description: "pong", Tags: []string{"pong"}}}}
	mux := http.NewServeMux()
	mux.Handle("GET /a2a/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("POST /a2a", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(pong{})))
	mux.HandleFunc("GET /native/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /native/invoke", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: delta\ndata: {\"text\":\"pong\"}\n\nevent: done\ndata: {}\n\n")
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

func (a *localAgent) Close() { a.srv.Close() }

// --- statistics ---

func pctl(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func printHeader() {
	fmt.Println("| store | round | round trips | A2A direct p50 / p99 | A2A via agentplane p50 / p99 | **added p50 / p99** | native run (WebSocket → SSE agent) p50 / p99 | via A2A − native run p50 / p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
}

func printRow(store, round string, lat *[nKinds][]time.Duration) {
	d50, d99 := pctl(lat[kDirect], 0.5), pctl(lat[kDirect], 0.99)
	v50, v99 := pctl(lat[kVia], 0.5), pctl(lat[kVia], 0.99)
	n50, n99 := pctl(lat[kNative], 0.5), pctl(lat[kNative], 0.99)
	fmt.Printf("| %s | %s | %d | %s / %s | %s / %s | **%s / %s** | %s / %s | %s / %s |\n", store, round, len(lat[kVia]),
		ms(d50), ms(d99), ms(v50), ms(v99), ms(v50-d50), ms(v99-d99), ms(n50), ms(n99), ms(v50-n50), ms(v99-n99))
}
