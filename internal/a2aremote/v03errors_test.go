package a2aremote

// The client against a real A2A v0.3 server — the released
// github.com/a2aproject/a2a-go v0.3 library, not the v2 module's compat
// binding (which writes errors the v1.0 way) — refusing and failing
// requests: its JSON-RPC errors must reach the run as the remote's own
// code and message, not as an answer that does not decode.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2asrv03 "github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentplane/agentplane/internal/agent"
)

// v03Remote is an a2a-go v0.3 agent: "crash" fails its executor with a
// plain error (v0.3 words it internal error, data {error: …}); "refuse"
// refuses with an A2A error carrying details; anything else completes.
type v03Remote struct{}

func (v03Remote) Execute(ctx context.Context, rc *a2asrv03.RequestContext, q eventqueue.Queue) error {
	text := ""
	if len(rc.Message.Parts) > 0 {
		if p, ok := rc.Message.Parts[0].(a2a03.TextPart); ok {
			text = p.Text
		}
	}
	switch text {
	case "crash":
		return errors.New("quota exhausted for today")
	case "refuse":
		return a2a03.NewError(a2a03.ErrUnsupportedOperation, "this agent takes no images").WithDetails(map[string]any{"hint": "send text"})
	}
	if err := q.Write(ctx, a2a03.NewSubmittedTask(rc, rc.Message)); err != nil {
		return err
	}
	done := a2a03.NewStatusUpdateEvent(rc, a2a03.TaskStateCompleted, a2a03.NewMessageForTask(a2a03.MessageRoleAgent, rc, a2a03.TextPart{Text: "ok"}))
	done.Final = true // a blocking message/send waits for it
	return q.Write(ctx, done)
}

func (v03Remote) Cancel(ctx context.Context, rc *a2asrv03.RequestContext, q eventqueue.Queue) error {
	ev := a2a03.NewStatusUpdateEvent(rc, a2a03.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// startV03Remote serves v03Remote with a v0.3 card at /.well-known/agent-card.json.
func startV03Remote(t *testing.T, streaming bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	mux := http.NewServeMux()
	mux.Handle("GET /.well-known/agent-card.json", a2asrv03.NewAgentCardHandler(a2asrv03.AgentCardProducerFn(func(context.Context) (*a2a03.AgentCard, error) {
		return &a2a03.AgentCard{Name: "old", Description: "a v0.3 agent", Version: "1", URL: srv.URL + "/rpc",
			PreferredTransport: a2a03.TransportProtocolJSONRPC, ProtocolVersion: "0.3.0",
			Capabilities: a2a03.AgentCapabilities{Streaming: streaming}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
			Skills: []a2a03.AgentSkill{{ID: "x", Name: "x", Description: "x", Tags: []string{"x"}}}}, nil
	})))
	mux.Handle("POST /rpc", a2asrv03.NewJSONRPCHandler(a2asrv03.NewHandler(v03Remote{})))
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func TestInvokeA2AV03RemoteErrors(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			srv := startV03Remote(t, streaming)
			c := testClient(t)
			card, err := c.FetchCard(context.Background(), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if evs, res, err := turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: "hi"}}); err != nil || res == nil || deltas(evs) != "ok" {
				t.Fatalf("hi: %v %+v %q", err, res, deltas(evs))
			}
			for content, want := range map[string]string{
				"crash":  "INTERNAL_ERROR: internal error: quota exhausted for today",
				"refuse": "UNSUPPORTED_OPERATION: this agent takes no images",
			} {
				_, _, err := turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: content}})
				if code(err) != agent.CodeAgentError || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v, want %s with %q", content, err, agent.CodeAgentError, want)
				}
			}
			// A resumed task the remote does not know.
			_, _, err = turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: "Oslo"}, RemoteTaskID: "gone", RemoteContextID: "ctx"})
			if code(err) != agent.CodeAgentError || !strings.Contains(err.Error(), "TASK_NOT_FOUND: task not found") {
				t.Errorf("resume of an unknown task: %v, want %s with %q", err, agent.CodeAgentError, "TASK_NOT_FOUND: task not found")
			}
		})
	}
}

// TestV03RemoteTaskErrors: tasks/cancel (sent when a run ends) and
// tasks/get of a v0.3 remote decode through the same transport.
func TestV03RemoteTaskErrors(t *testing.T) {
	srv := startV03Remote(t, true)
	c := testClient(t)
	card, err := c.FetchCard(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	err = c.CancelTask(context.Background(), card, "no-such-task", "run_1", "ses_1")
	if !errors.Is(err, a2a.ErrTaskNotFound) || !strings.Contains(err.Error(), "task not found") {
		t.Errorf("tasks/cancel of an unknown task: %v, want ErrTaskNotFound", err)
	}
	evs, _, err := turn(t, c, card, agent.InvokeRequest{InputMessage: agent.Message{Content: "hi"}})
	done, _ := remoteTaskOf(evs)
	if err != nil || done == "" {
		t.Fatalf("hi: %v %+v", err, evs)
	}
	if err := c.CancelTask(context.Background(), card, done, "run_2", "ses_1"); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Errorf("tasks/cancel of a completed task: %v, want ErrTaskNotCancelable", err)
	}

	parsed, err := parseCard(card)
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.newClient(context.Background(), parsed)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Destroy()
	_, err = client.GetTask(context.Background(), &a2a.GetTaskRequest{ID: "no-such-task"})
	if !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("tasks/get of an unknown task: %v, want ErrTaskNotFound", err)
	}
}

// TestMendV03Error: only an error whose data is not v1.0's typed array is
// rewritten, in a blocking answer and in a stream.
func TestMendV03Error(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":"1","result":{"kind":"task","id":"t","status":{"state":"failed","message":{"parts":[{"kind":"text","text":"error"}]}}}}`: "",
		`{"jsonrpc":"2.0","id":"1","error":{"code":-32001,"message":"task not found"}}`:                                                                 "",
		`{"jsonrpc":"2.0","id":"1","error":{"code":-32001,"message":"task not found","data":null}}`:                                                     "",
		`{"jsonrpc":"2.0","id":"1","error":{"code":-32001,"message":"task not found","data":[{"@type":"x","reason":"TASK_NOT_FOUND"}]}}`:                "",
		`{"jsonrpc":"2.0","id":"1","error":{"code":-32603,"message":"internal error","data":{"error":"boom"}}}`:                                         `{"error":{"code":-32603,"data":[{"error":"boom"}],"message":"internal error"},"id":"1","jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":"1","error":{"code":-32603,"message":"internal error","data":"boom"}}`:                                                   `{"error":{"code":-32603,"data":[{"data":"boom"}],"message":"internal error"},"id":"1","jsonrpc":"2.0"}`,
	} {
		if want == "" {
			want = in
		}
		if got := string(mendV03Error([]byte(in))); got != want {
			t.Errorf("mendV03Error(%s)\n = %s\nwant %s", in, got, want)
		}
	}
	stream := "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}\n\n: keep-alive\n\nid: 2\r\ndata:{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"error\":{\"code\":-32603,\"message\":\"internal error\",\"data\":{\"error\":\"boom\"}}}\r\n\r\n"
	want := "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}\n\n: keep-alive\n\nid: 2\r\ndata: {\"error\":{\"code\":-32603,\"data\":[{\"error\":\"boom\"}],\"message\":\"internal error\"},\"id\":\"1\",\"jsonrpc\":\"2.0\"}\r\n\r\n"
	body := &v03Body{body: io.NopCloser(nil), r: bufio.NewReader(iotest.OneByteReader(strings.NewReader(stream))), sse: true}
	if got, err := io.ReadAll(body); err != nil || string(got) != want {
		t.Errorf("stream: %q %v\nwant %q", got, err, want)
	}
}
