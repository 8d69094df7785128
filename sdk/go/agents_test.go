package agentplane_test

// Agent calls (Client.InvokeAgent) against the real platform: agentplane's
// server (internal/server, the code `agentplane serve` runs) in this
// process, on SQLite and PostgreSQL, with Go SDK agents on real HTTP
// servers and a real WebSocket client starting the root runs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/server"
	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

const testAdminKey = "sdk-test-admin-key-0123456789"

// platform is a real agentplane server running in this process.
type platform struct {
	URL string
	WS  string
}

type lineWriter struct {
	mu  sync.Mutex
	buf strings.Builder
	url chan string
}

var listeningRE = regexp.MustCompile(`agentplane listening on (http://\S+)`)

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := listeningRE.FindStringSubmatch(w.buf.String()); m != nil && w.url != nil {
		w.url <- m[1]
		w.url = nil
	}
	return len(p), nil
}

// startPlatform runs the server on dsn until the test ends.
func startPlatform(t *testing.T, dsn string) *platform {
	t.Helper()
	env := map[string]string{
		"AGENTPLANE_DB": dsn, "AGENTPLANE_ADMIN_KEY": testAdminKey, "AGENTPLANE_API_KEYS": "alice:alice-key",
		"AGENTPLANE_ENDPOINT_ALLOWLIST": "127.0.0.1/32",
	}
	cfg, err := config.Load([]string{"--addr", "127.0.0.1:0", "--instance-id", "sdk-" + t.Name(), "--shutdown-grace", "1s"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	found := make(chan string, 1)
	out := &lineWriter{url: found}
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg, out, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	select {
	case u := <-found:
		return &platform{URL: u, WS: "ws" + strings.TrimPrefix(u, "http") + "/v1/ws"}
	case err := <-done:
		t.Fatalf("server exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return nil
}

// agent serves h as agentID (linked to links) registered with p; platform
// is the client its requests get (nil: the default to p with its key).
func (p *platform) agent(t *testing.T, agentID string, links []string, h agentplane.HandlerFunc, configure ...func(*agentplane.Client)) {
	t.Helper()
	ah := &agentplane.AgentHandler{Handler: h, Logger: discardLogger()}
	srv := httptest.NewServer(ah)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	res, err := agentplane.Register(context.Background(), p.URL, testAdminKey, agentplane.RegisterParams{AgentID: agentID, Endpoint: srv.URL, LinkedAgents: links, RotateKey: true})
	if err != nil {
		t.Fatalf("register %s: %v", agentID, err)
	}
	c := agentplane.NewClient(p.URL, res.AgentAPIKey)
	for _, f := range configure {
		f(c)
	}
	ah.Platform = c
}

// run starts a root run of agentID over WebSocket and returns its
// client-facing messages up to its end.
func (p *platform) run(t *testing.T, agentID, content string) []map[string]any {
	t.Helper()
	return p.runIn(t, "", agentID, content)
}

// runIn is run in sessionID ("" = a new session); a run that asks back
// (input_required) ends there too.
func (p *platform) runIn(t *testing.T, sessionID, agentID, content string) []map[string]any {
	t.Helper()
	conn, _, err := websocket.DefaultDialer.Dial(p.WS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(m any) {
		if err := conn.WriteJSON(m); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"type": "hello", "user_id": "alice", "api_key": "alice-key"})
	invoke := map[string]any{"type": "agent_invoke", "request_id": "r1", "agent_id": agentID, "message": map[string]any{"role": "user", "content": content}}
	if sessionID != "" {
		invoke["session_id"] = sessionID
	}
	send(invoke)
	var out []map[string]any
	root := ""
	for {
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		var m map[string]any
		if err := conn.ReadJSON(&m); err != nil {
			t.Fatalf("read: %v (so far %v)", err, out)
		}
		if m["type"] == "ready" {
			continue
		}
		out = append(out, m)
		if m["type"] == "run_started" && root == "" {
			root, _ = m["run_id"].(string)
		}
		if m["run_id"] == root && (m["type"] == "done" || m["type"] == "input_required" || (m["type"] == "error" && m["seq"] != nil)) {
			return out
		}
		if m["type"] == "error" && m["seq"] == nil {
			t.Fatalf("error reply: %v", m)
		}
	}
}

// called is what a caller handler saw of one agent call.
type called struct {
	events  []agentplane.AgentEvent
	res     *agentplane.AgentResult
	text    string
	err     error
	attach  int
	rootRun string
}

// TestInvokeAgent: a caller follows a child's events (its own, each once,
// in order), gets its result and text; the child sees its depth and parent.
// A failed child is a *SubAgentError with its code, which, returned, fails
// the caller with it; a refusal is one with the HTTP status.
func TestInvokeAgent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		p := startPlatform(t, testdb.DSN(t, dialect))
		var childReq sync.Map // run id → *agentplane.Request
		p.agent(t, "worker", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
			childReq.Store(req.RunID, req)
			if req.InputMessage.Content == "fail" {
				s.Delta("trying")
				return &agentplane.Error{Code: "boom", Message: "told to fail"}
			}
			s.State("thinking", nil)
			s.Delta("Hello")
			s.Delta(" world")
			s.SetUsage(map[string]any{"words": 2})
			return nil
		})
		p.agent(t, "stranger", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error { return nil })
		got := make(chan called, 4)
		p.agent(t, "caller", []string{"worker"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
			target, msg, _ := strings.Cut(req.InputMessage.Content, ":")
			call, err := req.Client().Agents().Invoke(ctx, target, msg)
			if err != nil {
				got <- called{err: err}
				return s.Delta("refused")
			}
			defer call.Close()
			c := called{rootRun: req.RunID}
			for {
				ev, err := call.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				c.events = append(c.events, ev)
			}
			c.res, c.err = call.Result()
			c.text, _ = call.Text()
			c.attach = call.Attaches()
			got <- c
			if c.err != nil {
				return s.Delta("handled")
			}
			return nil
		})

		// A child that answers.
		msgs := p.run(t, "caller", "worker:hi")
		c := <-got
		if c.err != nil || c.res == nil {
			t.Fatalf("call: %v %v", c.err, c.res)
		}
		var types []string
		var last int64
		for _, ev := range c.events {
			types = append(types, ev.Type)
			if ev.RunID != c.res.RunID || ev.ParentRunID != c.rootRun || ev.Seq <= last {
				t.Fatalf("event %+v after seq %d (child %s, root %s)", ev, last, c.res.RunID, c.rootRun)
			}
			last = ev.Seq
		}
		if !slices.Equal(types, []string{"run_started", "state", "delta", "delta", "done"}) || c.events[2].Text != "Hello" {
			t.Fatalf("events %v", types)
		}
		var tu map[string]any
		json.Unmarshal(c.res.TotalUsage, &tu)
		if c.res.Status != "DONE" || c.res.Output != "Hello world" || c.text != "Hello world" || string(c.res.Usage) != `{"words":2}` || tu == nil || c.attach != 1 {
			t.Fatalf("result %+v (total_usage %s), text %q, attaches %d", c.res, c.res.TotalUsage, c.text, c.attach)
		}
		if r, ok := childReq.Load(c.res.RunID); !ok || r.(*agentplane.Request).Depth != 1 || r.(*agentplane.Request).ParentRunID != c.rootRun {
			t.Fatalf("the child's request %+v", r)
		}
		if end := msgs[len(msgs)-1]; end["type"] != "done" {
			t.Fatalf("root ended %v", end)
		}

		// A child that fails, handled by the caller.
		msgs = p.run(t, "caller", "worker:fail")
		c = <-got
		var se *agentplane.SubAgentError
		if !errors.As(c.err, &se) || se.Code != "boom" || se.RunStatus != "FAILED" || se.Status != 0 || se.RunID != c.res.RunID || se.Result == nil || c.events[len(c.events)-1].Type != "error" {
			t.Fatalf("failed child: %v %+v", c.err, c.res)
		}
		if end := msgs[len(msgs)-1]; end["type"] != "done" {
			t.Fatalf("root ended %v", end)
		}

		// Refused: not linked.
		p.run(t, "caller", "stranger:hi")
		c = <-got
		var ae *agentplane.APIError
		if !errors.As(c.err, &se) || se.Code != "agent_not_linked" || se.Status != http.StatusForbidden || !errors.As(c.err, &ae) {
			t.Fatalf("refusal: %v", c.err)
		}
	})
}

// TestInvokeAgentFailureFailsCaller: a *SubAgentError the handler returns
// ends its run with the child's code.
func TestInvokeAgentFailureFailsCaller(t *testing.T) {
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	p.agent(t, "worker", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		return &agentplane.Error{Code: "boom"}
	})
	p.agent(t, "caller", []string{"worker"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		call, err := req.Client().Agents().Invoke(ctx, "worker", "hi")
		if err != nil {
			return err
		}
		_, err = call.Text()
		return err
	})
	msgs := p.run(t, "caller", "go")
	if end := msgs[len(msgs)-1]; end["type"] != "error" || end["code"] != "boom" {
		t.Fatalf("the caller ended %v", end)
	}
}

// TestTranscriptOfChildRuns: the transcript the platform keeps of a child
// run, read by its caller, says whose rows they are — the child's agent_id
// and parent_run_id, and the intention — in StoredMessage.
func TestTranscriptOfChildRuns(t *testing.T) {
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	p.agent(t, "worker", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		return s.Delta("done it")
	})
	type seen struct {
		rootRun, intention string
		rows               []agentplane.StoredMessage
		err                error
	}
	got := make(chan seen, 1)
	p.agent(t, "caller", []string{"worker"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		out := seen{rootRun: req.RunID, intention: req.IntentionID}
		defer func() { got <- out }()
		call, err := req.Client().Agents().Invoke(ctx, "worker", "do it")
		if err != nil {
			out.err = err
			return err
		}
		if _, err := call.Text(); err != nil {
			out.err = err
			return err
		}
		out.rows, out.err = req.Client().Transcript(ctx, "")
		return out.err
	})
	p.run(t, "caller", "go")
	c := <-got
	if c.err != nil {
		t.Fatal(c.err)
	}
	var child []agentplane.StoredMessage
	for _, m := range c.rows {
		if m.RunID != c.rootRun {
			child = append(child, m)
		}
	}
	if len(child) != 2 {
		t.Fatalf("transcript %+v: want the child's input and answer", c.rows)
	}
	for _, m := range child {
		if m.AgentID != "worker" || m.ParentRunID != c.rootRun || m.IntentionID == "" {
			t.Errorf("child row %+v: want agent_id worker, parent_run_id %s and an intention_id", m, c.rootRun)
		}
	}
	for _, m := range c.rows {
		if m.RunID == c.rootRun && (m.AgentID != "caller" || m.ParentRunID != "" || m.IntentionID != c.intention) {
			t.Errorf("root row %+v: want agent_id caller, no parent_run_id, intention_id %s", m, c.intention)
		}
	}
}

// TestInvokeAgentRetriesRateLimited: a 429 (the key's request rate) is not a
// refusal: the call is sent again with its key after the retry_after_ms the
// platform named, at the invoke and at a re-attach, and more often than
// AgentMaxAttempts. A stand-in server plays the platform: the real one's
// limits are set in its config file.
func TestInvokeAgentRetriesRateLimited(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	limited := agentplane.AgentMaxAttempts + 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			IdempotencyKey string `json:"idempotency_key"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		keys = append(keys, body.IdempotencyKey)
		n := len(keys)
		mu.Unlock()
		event := func(seq int, typ, extra string) {
			fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"seq\":%d,\"run_id\":\"run_child\",\"parent_run_id\":\"run_1\"%s}\n\n", typ, typ, seq, extra)
		}
		switch {
		case n <= limited || n == limited+2:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":{"code":"rate_limited","message":"agent key over its request rate; retry later","retry_after":1,"retry_after_ms":30}}`))
		case n == limited+1: // cut short: the caller attaches again
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("x-child-run-id", "run_child")
			event(1, "run_started", "")
			event(2, "delta", `,"text":"Sunny "`)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("x-child-run-id", "run_child")
			event(1, "run_started", "")
			event(2, "delta", `,"text":"Sunny "`)
			event(3, "delta", `,"text":"in Paris"`)
			event(4, "done", `,"status":"DONE","output":"Sunny in Paris"`)
		}
	}))
	t.Cleanup(srv.Close)
	c := &agentplane.Client{BaseURL: srv.URL, APIKey: "ak_1", RunID: "run_1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	call, err := c.Agents().Invoke(ctx, "weather", "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	text, err := call.Text()
	took := time.Since(start)
	if err != nil || text != "Sunny in Paris" {
		t.Fatalf("Text = %q, %v", text, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != limited+3 || call.Attaches() != 2 {
		t.Fatalf("%d requests, %d attaches; want %d and 2", len(keys), call.Attaches(), limited+3)
	}
	for i, k := range keys {
		if k != keys[0] {
			t.Errorf("request %d used key %q, want %q: every attach sends the same key", i, k, keys[0])
		}
	}
	if min := time.Duration(limited+1) * 30 * time.Millisecond; took < min {
		t.Errorf("took %v, want at least %v: retried before the retry_after_ms the platform asked for", took, min)
	}
	if took > time.Second {
		t.Errorf("took %v: waited the header's whole second instead of retry_after_ms", took)
	}
}

// cutTransport remembers the connections it dialled so a test can reset
// them all, as a restarting proxy would.
type cutTransport struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (ct *cutTransport) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		ct.mu.Lock()
		ct.conns = append(ct.conns, c)
		ct.mu.Unlock()
	}
	return c, err
}

func (ct *cutTransport) cut() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	for _, c := range ct.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	ct.conns = nil
}

// TestInvokeAgentReattaches: the caller's connections are reset while its
// child runs; the stream attaches again with the same key, skips what it
// saw, and the platform runs one child.
func TestInvokeAgentReattaches(t *testing.T) {
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	halfway, release := make(chan struct{}), make(chan struct{})
	p.agent(t, "worker", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		s.Delta("before ")
		close(halfway)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return s.Delta("after")
	})
	ct := &cutTransport{}
	got := make(chan called, 1)
	p.agent(t, "caller", []string{"worker"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		call, err := req.Client().Agents().Invoke(ctx, "worker", "hi", agentplane.WithAgentIdempotencyKey("k1"))
		if err != nil {
			return err
		}
		var c called
		for {
			ev, err := call.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			c.events = append(c.events, ev)
		}
		c.res, c.err = call.Result()
		c.attach = call.Attaches()
		got <- c
		return c.err
	}, func(c *agentplane.Client) {
		c.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: ct.dial}}
	})
	go func() {
		<-halfway
		time.Sleep(200 * time.Millisecond) // the delta reached the caller
		ct.cut()
		close(release)
	}()
	msgs := p.run(t, "caller", "go")
	c := <-got
	if c.err != nil || c.res.Output != "before after" || c.attach < 2 {
		t.Fatalf("result %+v err %v attaches %d", c.res, c.err, c.attach)
	}
	var seqs []int64
	for _, ev := range c.events {
		seqs = append(seqs, ev.Seq)
	}
	if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
		t.Fatalf("seqs %v", seqs)
	}
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("root ended %v", end)
	}
	starts := 0
	for _, m := range msgs {
		if m["type"] == "sub_agent_call_start" {
			starts++
		}
	}
	if starts != 1 {
		t.Fatalf("%d children started", starts)
	}
}

// TestInvokeAgentInputRequired (issue 10): a child that asks back ends its
// stream with input_required; Result says INPUT_REQUIRED with the question
// (not a failure) and Text gives an *InputRequiredError, which the caller
// returns to ask the user. The user's answer resumes the caller, whose next
// call of the child resumes the child's question.
func TestInvokeAgentInputRequired(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		p := startPlatform(t, testdb.DSN(t, dialect))
		var mu sync.Mutex
		var results []*agentplane.AgentResult
		var childReqs []*agentplane.Request
		p.agent(t, "weather", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
			mu.Lock()
			childReqs = append(childReqs, req)
			mu.Unlock()
			if req.ResumesRunID == "" {
				return s.InputRequired("Which city?", map[string]any{"choices": []string{"Paris", "Oslo"}})
			}
			return s.Delta("Sunny in " + req.InputMessage.Content)
		})
		p.agent(t, "planner", []string{"weather"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
			call, err := req.Client().Agents().Invoke(ctx, "weather", req.InputMessage.Content)
			if err != nil {
				return err
			}
			defer call.Close()
			res, err := call.Result()
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
			if err != nil {
				return err
			}
			text, err := call.Text()
			if err != nil {
				return err // the child's question, asked of the user
			}
			return s.Delta("planner: " + text)
		})
		first := p.run(t, "planner", "weather please")
		last := first[len(first)-1]
		if last["type"] != "input_required" || last["question"] != "Which city?" {
			t.Fatalf("first turn ended %v", last)
		}
		mu.Lock()
		res := results[0]
		mu.Unlock()
		if res.Status != "INPUT_REQUIRED" || res.Question != "Which city?" || !strings.Contains(string(res.Detail), "Oslo") || res.Error != nil {
			t.Fatalf("result %+v", res)
		}
		second := p.runIn(t, last["session_id"].(string), "planner", "Oslo")
		if got := second[len(second)-1]; got["type"] != "done" {
			t.Fatalf("second turn ended %v", got)
		}
		var text strings.Builder
		for _, m := range second {
			if m["type"] == "delta" {
				text.WriteString(m["text"].(string))
			}
		}
		if text.String() != "planner: Sunny in Oslo" {
			t.Errorf("answer %q", text.String())
		}
		mu.Lock()
		defer mu.Unlock()
		if len(childReqs) != 2 || childReqs[1].ResumesRunID != results[0].RunID || childReqs[1].IntentionID == "" || childReqs[1].IntentionID != childReqs[0].IntentionID {
			t.Errorf("the child's requests %+v %+v", childReqs[0], childReqs[len(childReqs)-1])
		}
	})
}
