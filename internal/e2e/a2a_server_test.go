package e2e

// The A2A server (issue 10, DESIGN §12) against the real binary on both
// stores, with github.com/a2aproject/a2a-go/v2's client over protocol v1.0
// and over v0.3 (its compat transport): the card, send, stream,
// input-required and its answer on the same task, cancel, get, ownership,
// refusals; approvals and client tools of a run started over A2A answered
// with data parts. The @a2a-js/sdk clients are in a2a_interop_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
)

// bearer adds a user key to every A2A call.
type bearer struct {
	a2aclient.PassthroughInterceptor
	key string
}

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, any, error) {
	req.ServiceParams["Authorization"] = []string{"Bearer " + b.key}
	return ctx, nil, nil
}

// a2aDial resolves agentID's card on s and returns a client speaking v1.0,
// or only v0.3 (the compat transport) when v03.
func a2aDial(t *testing.T, s *server, agentID, key string, v03 bool) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	hc := &http.Client{}
	// A v1.0 client reads the card with a2a-go's default parser, a v0.3
	// one with the compat parser: the card is both.
	resolver := &agentcard.Resolver{Client: hc}
	if v03 {
		resolver.CardParser = a2av0.NewAgentCardParser()
	}
	card, err := resolver.Resolve(ctx, s.URL+"/a2a/"+agentID)
	if err != nil {
		t.Fatalf("resolve the card of %s (v0.3 %v): %v", agentID, v03, err)
	}
	if sc, ok := card.SecuritySchemes["agentplaneUserKey"].(a2a.HTTPAuthSecurityScheme); !ok || !strings.EqualFold(sc.Scheme, "bearer") {
		t.Fatalf("the card's security schemes (v0.3 %v): %#v", v03, card.SecuritySchemes)
	}
	opts := []a2aclient.FactoryOption{
		a2aclient.WithCompatTransport(a2av0.Version, a2a.TransportProtocolJSONRPC, a2av0.NewJSONRPCTransportFactory(a2av0.JSONRPCTransportConfig{Client: hc})),
		a2aclient.WithCallInterceptors(bearer{key: key}),
	}
	if v03 {
		opts = append(opts, a2aclient.WithDefaultsDisabled())
	} else {
		opts = append(opts, a2aclient.WithJSONRPCTransport(hc))
	}
	c, err := a2aclient.NewFromCard(ctx, card, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Destroy() })
	return c, card
}

func userMsg(text string) *a2a.SendMessageRequest {
	return &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))}
}

func answerMsg(task *a2a.Task, parts ...*a2a.Part) *a2a.SendMessageRequest {
	return &a2a.SendMessageRequest{Message: a2a.NewMessageForTask(a2a.MessageRoleUser, task, parts...)}
}

// collectStream reads a stream to its end: the events in a compact form,
// the task (from the first event), the text of the artifacts and the last
// status.
type streamed struct {
	kinds  []string
	task   *a2a.Task
	text   string
	status *a2a.TaskStatusUpdateEvent
}

func collectStream(t *testing.T, evs func(func(a2a.Event, error) bool), stopAfter func(a2a.Event) bool) streamed {
	t.Helper()
	var out streamed
	for ev, err := range evs {
		if err != nil {
			t.Fatalf("stream: %v (after %v)", err, out.kinds)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			out.task = e
			out.kinds = append(out.kinds, "task:"+string(e.Status.State))
		case *a2a.TaskArtifactUpdateEvent:
			for _, p := range e.Artifact.Parts {
				out.text += p.Text()
			}
			out.kinds = append(out.kinds, fmt.Sprintf("artifact:append=%v", e.Append))
		case *a2a.TaskStatusUpdateEvent:
			out.status = e
			out.kinds = append(out.kinds, "status:"+string(e.Status.State))
		default:
			out.kinds = append(out.kinds, fmt.Sprintf("%T", ev))
		}
		if stopAfter != nil && stopAfter(ev) {
			break
		}
	}
	return out
}

func msgText(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text())
	}
	return b.String()
}

func dataOf(m *a2a.Message) map[string]any {
	if m == nil {
		return nil
	}
	for _, p := range m.Parts {
		if d, ok := p.Data().(map[string]any); ok {
			return d
		}
	}
	return nil
}

func artifactText(task *a2a.Task) string {
	var b strings.Builder
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			b.WriteString(p.Text())
		}
	}
	return b.String()
}

// registerA2A registers agentID at endpoint with a2a:true and returns its
// key (empty on re-registration).
func registerA2A(t *testing.T, s *server, agentID, endpoint string, extra map[string]any) string {
	t.Helper()
	body := map[string]any{"agent_id": agentID, "endpoint": endpoint, "capabilities": []string{"chat", "weather"}, "a2a": true,
		"description": "Answers about " + agentID}
	for k, v := range extra {
		body[k] = v
	}
	code, out := s.call("POST", "/v1/agents/register", adminKey, body)
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("register %s: %d %v", agentID, code, out)
	}
	key, _ := out["agent_api_key"].(string)
	return key
}

// sameAsGet fails t unless tasks/get answers task as it is — its history,
// artifacts and status (whose message is new each time it is built, so its
// id is left out).
func sameAsGet(t *testing.T, c *a2aclient.Client, task *a2a.Task) {
	t.Helper()
	got, err := c.GetTask(ctxTimeout(t, 30*time.Second), &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatalf("get %s: %v", task.ID, err)
	}
	norm := func(x *a2a.Task) string {
		y := *x
		if m := y.Status.Message; m != nil {
			mm := *m
			mm.ID = ""
			y.Status.Message = &mm
		}
		b, _ := json.Marshal(&y)
		return string(b)
	}
	if a, b := norm(task), norm(got); a != b {
		t.Errorf("the send answered\n%s\nbut get reads\n%s", a, b)
	}
}

func TestA2AServer(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		echoer := newScriptedAgent(t, modeStream, 3)
		registerA2A(t, s, "echoer", echoer.URL, nil)
		registerA2A(t, s, "ask", askingAgent(t).URL, nil)
		registerA2A(t, s, "slow", newScriptedAgent(t, modeStreamForever, 0).URL, nil)
		s.register("private", newScriptedAgent(t, modeStream, 1).URL) // not a2a

		// The card: public, no secrets, both protocol versions listed.
		resp, err := http.Get(s.URL + "/a2a/echoer/.well-known/agent-card.json")
		if err != nil {
			t.Fatal(err)
		}
		var card map[string]any
		json.NewDecoder(resp.Body).Decode(&card)
		resp.Body.Close()
		raw, _ := json.Marshal(card)
		if resp.StatusCode != 200 || card["name"] != "echoer" || card["url"] != s.URL+"/a2a/echoer" || card["protocolVersion"] != "0.3" ||
			!strings.Contains(string(raw), `"streaming":true`) || !strings.Contains(string(raw), `"weather"`) || strings.Contains(string(raw), echoer.URL) {
			t.Fatalf("card %d %s", resp.StatusCode, raw)
		}
		for path, want := range map[string]int{"/a2a/private/.well-known/agent-card.json": 404, "/a2a/ghost/.well-known/agent-card.json": 404} {
			if code, _ := s.call("GET", path, "", nil); code != want {
				t.Errorf("GET %s: %d, want %d", path, code, want)
			}
		}
		send := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`
		for _, c := range []struct {
			path, key string
			want      int
		}{{"/a2a/echoer", "", 401}, {"/a2a/echoer", "bogus", 401}, {"/a2a/echoer", adminKey, 403}, {"/a2a/private", "alice-key", 404}} {
			if code, body := s.call("POST", c.path, c.key, send); code != c.want {
				t.Errorf("POST %s with %q: %d %v, want %d", c.path, c.key, code, body, c.want)
			}
		}

		for _, v03 := range []bool{false, true} {
			t.Run(fmt.Sprintf("v03=%v", v03), func(t *testing.T) {
				ctx := ctxTimeout(t, 60*time.Second)
				c, _ := a2aDial(t, s, "echoer", "alice-key", v03)
				// Blocking send: the task when it has ended.
				res, err := c.SendMessage(ctx, userMsg("hello"))
				if err != nil {
					t.Fatal(err)
				}
				task, ok := res.(*a2a.Task)
				if !ok || task.Status.State != a2a.TaskStateCompleted || artifactText(task) != "w0 w1 w2 " || !strings.HasPrefix(string(task.ID), "int_") {
					t.Fatalf("send answered %#v", res)
				}
				// The answer is the task as tasks/get reads it back.
				sameAsGet(t, c, task)
				// The context is the session: alice reads it over the API.
				if code, _ := s.call("GET", "/v1/sessions/"+task.ContextID+"/events", "alice-key", nil); code != 200 {
					t.Errorf("the task's context %s is not alice's session: %d", task.ContextID, code)
				}
				if code, _ := s.call("GET", "/v1/sessions/"+task.ContextID+"/events", "bob-key", nil); code != 404 {
					t.Errorf("bob reads alice's A2A session: %d", code)
				}
				// Streaming, in the same context.
				req := userMsg("again")
				req.Message.ContextID = task.ContextID
				st := collectStream(t, c.SendStreamingMessage(ctx, req), nil)
				want := "task:TASK_STATE_WORKING,artifact:append=false,artifact:append=true,artifact:append=true,status:TASK_STATE_COMPLETED"
				if strings.Join(st.kinds, ",") != want || st.text != "w0 w1 w2 " || st.task.ContextID != task.ContextID || st.task.ID == task.ID {
					t.Fatalf("stream %v %q, want %s", st.kinds, st.text, want)
				}
				// get, and a message to the ended task.
				got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: st.task.ID})
				if err != nil || got.Status.State != a2a.TaskStateCompleted || artifactText(got) != "w0 w1 w2 " || len(got.History) != 1 || msgText(got.History[0]) != "again" {
					t.Fatalf("get %+v %v", got, err)
				}
				if _, err := c.SendMessage(ctx, answerMsg(got, a2a.NewTextPart("more"))); !errors.Is(err, a2a.ErrInvalidParams) {
					t.Errorf("a message to a completed task: %v, want invalid params", err)
				}
				if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "int_nope"}); !errors.Is(err, a2a.ErrTaskNotFound) {
					t.Errorf("get of an unknown task: %v", err)
				}
				// Another user's key does not see the task, nor cancel it.
				bobc, _ := a2aDial(t, s, "echoer", "bob-key", v03)
				if _, err := bobc.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
					t.Errorf("bob's get of alice's task: %v", err)
				}
				// Another agent's URL does not serve it either.
				askc, _ := a2aDial(t, s, "ask", "alice-key", v03)
				if _, err := askc.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
					t.Errorf("get through another agent: %v", err)
				}

				// Input required, then the answer on the same task.
				st = collectStream(t, askc.SendStreamingMessage(ctx, userMsg("weather?")), nil)
				if st.status == nil || st.status.Status.State != a2a.TaskStateInputRequired || msgText(st.status.Status.Message) != "Which city?" ||
					fmt.Sprint(dataOf(st.status.Status.Message)["choices"]) != "[Paris Oslo]" {
					t.Fatalf("ask stream %v %+v", st.kinds, st.status)
				}
				asked := st.task
				res, err = askc.SendMessage(ctx, answerMsg(asked, a2a.NewTextPart("Paris")))
				if err != nil {
					t.Fatal(err)
				}
				done := res.(*a2a.Task)
				sameAsGet(t, askc, done)
				// A blocking send that ends asking: answered input-required,
				// as get reads it.
				if res, err = askc.SendMessage(ctx, userMsg("weather?")); err != nil {
					t.Fatal(err)
				} else if q := res.(*a2a.Task); q.Status.State != a2a.TaskStateInputRequired || msgText(q.Status.Message) != "Which city?" {
					t.Errorf("blocking send of a question: %+v", q.Status)
				} else {
					sameAsGet(t, askc, q)
				}
				if done.ID != asked.ID || done.ContextID != asked.ContextID || done.Status.State != a2a.TaskStateCompleted || artifactText(done) != "Sunny in Paris" {
					t.Fatalf("answer %+v", done)
				}
				hist := []string{}
				for _, m := range done.History {
					hist = append(hist, string(m.Role)+":"+msgText(m))
				}
				if strings.Join(hist, "|") != "ROLE_USER:weather?|ROLE_AGENT:Which city?|ROLE_USER:Paris" && strings.Join(hist, "|") != "user:weather?|agent:Which city?|user:Paris" {
					t.Errorf("history %v", hist)
				}
				// The platform's view: two runs of one intention.
				code, runs := s.call("GET", "/v1/sessions/"+asked.ContextID+"/events", "alice-key", nil)
				if code != 200 || !strings.Contains(fmt.Sprint(runs), "resumes_run_id") {
					t.Errorf("the answer did not resume: %v", runs)
				}

				// Cancel a running task: the stream ends canceled, get says
				// canceled, a second cancel is refused.
				slowc, _ := a2aDial(t, s, "slow", "alice-key", v03)
				var taskID a2a.TaskID
				var cancelled *a2a.Task
				st = collectStream(t, slowc.SendStreamingMessage(ctx, userMsg("go")), func(ev a2a.Event) bool {
					if tk, ok := ev.(*a2a.Task); ok {
						taskID = tk.ID
					}
					if _, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && cancelled == nil {
						if cancelled, err = slowc.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID}); err != nil {
							t.Fatalf("cancel: %v", err)
						}
					}
					return false
				})
				if cancelled == nil || cancelled.Status.State != a2a.TaskStateCanceled || st.status == nil || st.status.Status.State != a2a.TaskStateCanceled {
					t.Fatalf("cancel answered %+v; stream %v", cancelled, st.kinds)
				}
				if _, err := slowc.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
					t.Errorf("second cancel: %v", err)
				}
				if _, err := bobc.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID}); !errors.Is(err, a2a.ErrTaskNotFound) {
					t.Errorf("bob's cancel: %v", err)
				}

				// A resubscription sends the task as it is, then chunks that
				// append to its artifact: the first must not replace the
				// output the snapshot already holds (A2A: append false
				// replaces).
				var resub a2a.TaskID
				collectStream(t, slowc.SendStreamingMessage(ctx, userMsg("go")), func(ev a2a.Event) bool {
					if tk, ok := ev.(*a2a.Task); ok {
						resub = tk.ID
					}
					_, chunk := ev.(*a2a.TaskArtifactUpdateEvent)
					return chunk
				})
				var kinds []string
				snapText := ""
				for ev, err := range slowc.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: resub}) {
					if err != nil {
						t.Fatalf("resubscribe: %v (after %v)", err, kinds)
					}
					switch e := ev.(type) {
					case *a2a.Task:
						snapText = artifactText(e)
						kinds = append(kinds, "task")
					case *a2a.TaskArtifactUpdateEvent:
						kinds = append(kinds, fmt.Sprintf("append=%v", e.Append))
					}
					if len(kinds) == 3 {
						break
					}
				}
				if strings.Join(kinds, ",") != "task,append=true,append=true" || snapText == "" {
					t.Errorf("resubscription %v (snapshot %q), want the task with its output so far, then appended chunks", kinds, snapText)
				}
				if _, err := slowc.CancelTask(ctx, &a2a.CancelTaskRequest{ID: resub}); err != nil {
					t.Errorf("cancel the resubscribed task: %v", err)
				}
			})
		}
		s.checkRaces()
	})
}

// TestA2AServerToolsAnswered: a run started over A2A that needs an
// approval, then a client tool, is input-required with a data part saying
// which; the A2A client answers each with a data part on the same task and
// the same run goes on. No WebSocket client is connected: the A2A stream
// is the session's client (no client_offline).
func TestA2AServerToolsAnswered(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		te := newToolEndpoint(t)
		putTool(t, s, "transfer", transferTool(te.URL+"/ok", "fail_run", alwaysApproval))
		putTool(t, s, "pick_city", map[string]any{"kind": "client", "description": "Asks the user's device.", "parameters": map[string]any{"type": "object"}, "policy": map[string]any{"decision": "allow"}})
		startGoToolAgent(t, s, "tooler")
		registerA2A(t, s, "tooler", goToolAgentURL(t, s, "tooler"), nil)
		ctx := ctxTimeout(t, 90*time.Second)
		for _, v03 := range []bool{false, true} {
			c, _ := a2aDial(t, s, "tooler", "alice-key", v03)
			spec, _ := json.Marshal(map[string]any{"tool": "transfer", "args": map[string]any{"amount": 500, "to": "bob"}})
			st := collectStream(t, c.SendStreamingMessage(ctx, userMsg(string(spec))), nil)
			d := dataOf(st.status.Status.Message)
			if st.status.Status.State != a2a.TaskStateInputRequired || d["kind"] != "approval_required" || d["tool_name"] != "transfer" || d["approval_id"] == nil {
				t.Fatalf("approval stream %v %+v", st.kinds, d)
			}
			// A bad answer is refused and changes nothing.
			if _, err := c.SendMessage(ctx, answerMsg(st.task, a2a.NewDataPart(map[string]any{"approval_id": "apr_nope", "decision": "approve"}))); err == nil {
				t.Error("an answer for an unknown approval was accepted")
			}
			st2 := collectStream(t, c.SendStreamingMessage(ctx, answerMsg(st.task, a2a.NewDataPart(map[string]any{"approval_id": d["approval_id"], "decision": "approve", "reason": "ok"}))), nil)
			if st2.status == nil || st2.status.Status.State != a2a.TaskStateCompleted || !strings.Contains(st2.text, `"amount":500`) || st2.task.ID != st.task.ID {
				t.Fatalf("after approval: %v %q", st2.kinds, st2.text)
			}

			spec, _ = json.Marshal(map[string]any{"tool": "pick_city", "args": map[string]any{}})
			res, err := c.SendMessage(ctx, userMsg(string(spec)))
			if err != nil {
				t.Fatal(err)
			}
			task := res.(*a2a.Task)
			d = dataOf(task.Status.Message)
			if task.Status.State != a2a.TaskStateInputRequired || d["kind"] != "tool_request" || d["tool_name"] != "pick_city" {
				t.Fatalf("client tool: %+v %v", task.Status, d)
			}
			// get shows the same.
			got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != a2a.TaskStateInputRequired || dataOf(got.Status.Message)["tool_call_id"] != d["tool_call_id"] {
				t.Fatalf("get of a waiting task %+v %v", got, err)
			}
			res, err = c.SendMessage(ctx, answerMsg(task, a2a.NewDataPart(map[string]any{"tool_call_id": d["tool_call_id"], "ok": true, "result": map[string]any{"city": "Oslo"}})))
			if err != nil {
				t.Fatal(err)
			}
			if done := res.(*a2a.Task); done.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(done), "Oslo") {
				t.Fatalf("after the client tool: %+v %q", done.Status, artifactText(done))
			}
		}
		s.checkRaces()
	})
}

// goToolAgentURL is the endpoint registered for agentID.
func goToolAgentURL(t *testing.T, s *server, agentID string) string {
	t.Helper()
	code, ag := s.call("GET", "/v1/agents/"+agentID, adminKey, nil)
	if code != 200 {
		t.Fatalf("agent %s: %d", agentID, code)
	}
	return ag["endpoint"].(string)
}
