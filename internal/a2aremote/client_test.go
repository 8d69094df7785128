package a2aremote

// The A2A client against real A2A servers: an a2a-go server in the test
// (streaming and not, over v1.0 and v0.3), and broken peers that send
// garbage, hang or disconnect.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/store"
)

// remote is an A2A agent: "ask" asks which city and completes with the
// answer on the same task; "slow" works until cancelled; "fail" fails;
// "hello" answers with a message; anything else streams three chunks.
type remote struct {
	mu        sync.Mutex
	cancelled []string
	continued []string // task ids of continued tasks
	headers   []http.Header
}

func (e *remote) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text := ec.Message.Parts[0].Text()
		say := func(s string) *a2a.Message {
			return a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(s))
		}
		if ec.StoredTask != nil {
			e.mu.Lock()
			e.continued = append(e.continued, string(ec.TaskID))
			e.mu.Unlock()
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, say("Sunny in "+text)), nil)
			return
		}
		if text == "hello" {
			yield(a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("hi there")), nil)
			return
		}
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, say("on it")), nil) {
			return
		}
		switch text {
		case "ask":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec,
				a2a.NewTextPart("Which city?"), a2a.NewDataPart(map[string]any{"choices": []any{"Paris"}}))), nil)
		case "fail":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateFailed, say("boom")), nil)
		case "slow":
			first := a2a.NewArtifactEvent(ec, a2a.NewTextPart("working…"))
			yield(first, nil)
			<-ctx.Done()
		default:
			first := a2a.NewArtifactEvent(ec, a2a.NewTextPart("one "))
			if !yield(first, nil) {
				return
			}
			for _, c := range []string{"two ", "three"} {
				if !yield(a2a.NewArtifactUpdateEvent(ec, first.Artifact.ID, a2a.NewTextPart(c)), nil) {
					return
				}
			}
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
		}
	}
}

func (e *remote) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		e.mu.Lock()
		e.cancelled = append(e.cancelled, string(ec.TaskID))
		e.mu.Unlock()
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// startRemote serves e as an A2A agent (v1.0 and v0.3 on one URL), its
// card saying whether it streams and which versions it offers.
func startRemote(t *testing.T, e *remote, streaming, onlyV03 bool) *httptest.Server {
	t.Helper()
	h := a2asrv.NewHandler(e)
	v1 := a2asrv.NewJSONRPCHandler(h)
	v03 := a2av0.NewJSONRPCHandler(h)
	srv := httptest.NewUnstartedServer(nil)
	mux := http.NewServeMux()
	mux.Handle("GET /agent/.well-known/agent-card.json", a2asrv.NewAgentCardHandler(a2av0.NewAgentCardProducer(a2asrv.AgentCardProducerFn(func(context.Context) (*a2a.AgentCard, error) {
		url := srv.URL + "/agent"
		ifaces := []*a2a.AgentInterface{{URL: url, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version}}
		if !onlyV03 {
			ifaces = append(ifaces, a2a.NewAgentInterface(url, a2a.TransportProtocolJSONRPC))
		}
		return &a2a.AgentCard{Name: "remote", Description: "test", Version: "1", SupportedInterfaces: ifaces,
			Capabilities: a2a.AgentCapabilities{Streaming: streaming}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
			Skills: []a2a.AgentSkill{{ID: "x", Name: "x", Description: "x", Tags: []string{"x"}}}}, nil
	}))))
	mux.HandleFunc("POST /agent", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.headers = append(e.headers, r.Header.Clone())
		e.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if strings.Contains(string(body), `"method":"message/`) || strings.Contains(string(body), `"method":"tasks/`) {
			v03.ServeHTTP(w, r)
			return
		}
		v1.ServeHTTP(w, r)
	})
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func testClient(t *testing.T) *Client {
	allow, err := agent.ParseAllowlist("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	return &Client{HTTP: agent.NewHTTPClient(allow), Allow: allow, FirstByteTimeout: 3 * time.Second, IdleTimeout: 3 * time.Second, CancelTimeout: 3 * time.Second}
}

// turn invokes with content and returns the stream events and the outcome.
func turn(t *testing.T, c *Client, card json.RawMessage, req agent.InvokeRequest) ([]agent.StreamEvent, *agent.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req.Protocol, req.Card = store.ProtocolA2A, card
	var evs []agent.StreamEvent
	res, err := c.Invoke(ctx, "", req, func(ev agent.StreamEvent) error { evs = append(evs, ev); return nil })
	return evs, res, err
}

func deltas(evs []agent.StreamEvent) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "delta" {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func remoteTaskOf(evs []agent.StreamEvent) (string, string) {
	for _, e := range evs {
		if e.Type == "remote_task" {
			return e.RemoteTaskID, e.RemoteContextID
		}
	}
	return "", ""
}

func TestInvokeA2A(t *testing.T) {
	for _, mode := range []struct {
		name               string
		streaming, onlyV03 bool
	}{{"stream-v1", true, false}, {"stream-v03", true, true}, {"blocking-v1", false, false}, {"blocking-v03", false, true}} {
		t.Run(mode.name, func(t *testing.T) {
			e := &remote{}
			srv := startRemote(t, e, mode.streaming, mode.onlyV03)
			c := testClient(t)
			card, err := c.FetchCard(context.Background(), srv.URL+"/agent")
			if err != nil {
				t.Fatal(err)
			}
			if cardURL, err := c.FetchCard(context.Background(), srv.URL+"/agent/.well-known/agent-card.json"); err != nil || string(cardURL) != string(card) {
				t.Fatalf("the card by its own URL: %v", err)
			}

			evs, res, err := turn(t, c, card, agent.InvokeRequest{RunID: "run_1", SessionID: "ses_1", InputMessage: agent.Message{Role: "user", Content: "go"}})
			if err != nil || res == nil || res.InputRequired != nil || deltas(evs) != "one two three" {
				t.Fatalf("stream: %v %+v %q", err, res, deltas(evs))
			}
			task, ctxID := remoteTaskOf(evs)
			if task == "" || ctxID == "" {
				t.Fatalf("no remote task in %+v", evs)
			}
			e.mu.Lock()
			h := e.headers[len(e.headers)-1]
			e.mu.Unlock()
			if h.Get("x-run-id") != "run_1" || h.Get("traceparent") == "" {
				t.Errorf("headers %v", h)
			}

			// Input required, then the answer continues the same task.
			evs, res, err = turn(t, c, card, agent.InvokeRequest{RunID: "run_2", InputMessage: agent.Message{Role: "user", Content: "ask"}})
			if err != nil || res.InputRequired == nil || res.InputRequired.Question != "Which city?" || !strings.Contains(string(res.InputRequired.Detail), "Paris") {
				t.Fatalf("ask: %v %+v", err, res)
			}
			asked, askedCtx := remoteTaskOf(evs)
			evs, res, err = turn(t, c, card, agent.InvokeRequest{RunID: "run_3", InputMessage: agent.Message{Role: "user", Content: "Paris"},
				RemoteTaskID: asked, RemoteContextID: askedCtx})
			if err != nil || res.InputRequired != nil || deltas(evs) != "Sunny in Paris" {
				t.Fatalf("answer: %v %+v %q", err, res, deltas(evs))
			}
			e.mu.Lock()
			continued := fmt.Sprint(e.continued)
			e.mu.Unlock()
			if continued != "["+asked+"]" {
				t.Errorf("the remote continued %s, want [%s]", continued, asked)
			}

			// A direct message answer, and a failure.
			if evs, res, err = turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: "hello"}}); err != nil || res == nil || deltas(evs) != "hi there" {
				t.Errorf("hello: %v %q", err, deltas(evs))
			}
			if _, _, err = turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: "fail"}}); code(err) != agent.CodeAgentError || !strings.Contains(err.Error(), "boom") {
				t.Errorf("fail: %v", err)
			}

			// The run ends while the remote works: tasks/cancel reaches it.
			if mode.streaming {
				ctx, cancel := context.WithCancel(context.Background())
				var seen string
				done := make(chan error, 1)
				go func() {
					_, err := c.Invoke(ctx, "", agent.InvokeRequest{Protocol: store.ProtocolA2A, Card: card, InputMessage: agent.Message{Content: "slow"}}, func(ev agent.StreamEvent) error {
						if ev.Type == "remote_task" {
							seen = ev.RemoteTaskID
						}
						if ev.Type == "delta" {
							cancel()
						}
						return nil
					})
					done <- err
				}()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled invoke: %v", err)
				}
				e.mu.Lock()
				got := fmt.Sprint(e.cancelled)
				e.mu.Unlock()
				if seen == "" || got != "["+seen+"]" {
					t.Errorf("the remote cancelled %s, want [%s]", got, seen)
				}
			}
		})
	}
}

func code(err error) string {
	var ie *agent.InvokeError
	if errors.As(err, &ie) {
		return ie.Code
	}
	return fmt.Sprint(err)
}

// TestInvokeA2ABrokenPeers: a remote that answers garbage, an HTTP error,
// not an event stream, hangs, or disconnects mid-stream fails the call
// with a clear code.
func TestInvokeA2ABrokenPeers(t *testing.T) {
	var base string
	mode := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			fmt.Fprintf(w, `{"name":"broken","description":"x","version":"1","supportedInterfaces":[{"url":%q,"protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"capabilities":{"streaming":%v},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[]}`,
				base+"/rpc", !strings.HasPrefix(mode, "blocking"))
			return
		}
		io.Copy(io.Discard, r.Body)
		flush := func() { http.NewResponseController(w).Flush() }
		switch mode {
		case "garbage-sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {not json\n\n")
		case "unknown-state":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"jsonrpc":"2.0","id":"1","result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_DANCING"}}}}`+"\n\n")
		case "http-500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "json-not-sse":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":"1","result":{}}`)
		case "hang":
			w.Header().Set("Content-Type", "text/event-stream")
			flush()
			<-r.Context().Done()
		case "disconnect":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}}`+"\n\n")
			flush()
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
		case "ends-early":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}}`+"\n\n")
		case "blocking-garbage":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, "this is not JSON")
		case "rpc-error":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, `data: {"jsonrpc":"2.0","id":"1","error":{"code":-32602,"message":"no thanks"}}`+"\n\n")
		}
	}))
	defer srv.Close()
	base = srv.URL
	c := testClient(t)
	c.FirstByteTimeout = 500 * time.Millisecond
	for m, want := range map[string]string{
		"garbage-sse":      agent.CodeAgentProtocolError,
		"unknown-state":    agent.CodeAgentProtocolError,
		"http-500":         agent.CodeAgentHTTPError,
		"json-not-sse":     agent.CodeAgentProtocolError,
		"hang":             agent.CodeAgentTimeout,
		"disconnect":       agent.CodeAgentDisconnected,
		"ends-early":       agent.CodeAgentDisconnected,
		"blocking-garbage": agent.CodeAgentProtocolError,
		"rpc-error":        agent.CodeAgentError,
	} {
		mode = m
		card, err := c.FetchCard(context.Background(), srv.URL)
		if err != nil {
			t.Fatalf("%s: card: %v", m, err)
		}
		_, _, err = turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: "go"}})
		if code(err) != want {
			t.Errorf("%s: %v, want %s", m, err, want)
		}
	}
	// An unreachable agent.
	card, _ := c.FetchCard(context.Background(), srv.URL)
	srv.Close()
	if _, _, err := turn(t, testClient(t), card, agent.InvokeRequest{InputMessage: agent.Message{Content: "go"}}); code(err) != agent.CodeAgentUnreachable {
		t.Errorf("closed server: %v", err)
	}
}

// TestFetchCardRefusals: registration refuses a card it cannot use.
func TestFetchCardRefusals(t *testing.T) {
	body := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	c := testClient(t)
	for b, want := range map[string]string{
		"not json": "invalid_agent_card",
		`{"name":"x","supportedInterfaces":[{"url":"http://10.1.2.3/a","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"capabilities":{}}`: "endpoint_not_allowed",
		`{"name":"x","supportedInterfaces":[{"url":"` + srv.URL + `","protocolBinding":"GRPC","protocolVersion":"1.0"}],"capabilities":{}}`:      "invalid_agent_card",
	} {
		body = b
		_, err := c.FetchCard(context.Background(), srv.URL)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("card %.40q: %v, want %s", b, err, want)
		}
	}
	if _, err := c.FetchCard(context.Background(), "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "agent_card_unavailable") {
		t.Errorf("no server: %v", err)
	}
}
