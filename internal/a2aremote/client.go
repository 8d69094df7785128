package a2aremote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/store"
)

// Client speaks A2A to remote agents. Its zero value is not usable: HTTP
// must be set (the SSRF-checked agent.NewHTTPClient).
type Client struct {
	// HTTP sends every request (cards and calls). It must check the
	// allowlist when it dials, and must have no Timeout (it would cut
	// streams): each call is bounded by the timeouts below.
	HTTP *http.Client
	// Allow checks the URLs a card lists at registration (nil: not checked
	// there; HTTP still refuses them when dialled).
	Allow *agent.Allowlist
	// FirstByteTimeout bounds the time to the first event of a streamed
	// call, or to the answer of a blocking one (an agent whose card says
	// it cannot stream); IdleTimeout the silence between a stream's events
	// (any bytes count). Zero: agent.DefaultFirstByteTimeout and
	// agent.DefaultIdleTimeout.
	FirstByteTimeout time.Duration
	IdleTimeout      time.Duration
	// CancelTimeout bounds the tasks/cancel sent when a run ends while its
	// remote task still runs (default 5 s).
	CancelTimeout time.Duration

	once  sync.Once
	hc    *http.Client
	v03hc *http.Client // hc, with v0.3's error shape mended (v03Errors)
}

func (c *Client) http() *http.Client {
	c.once.Do(func() {
		base := c.HTTP
		if base == nil {
			base = agent.NewHTTPClient(nil)
		}
		rt := base.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		c.hc = &http.Client{Transport: &tracker{base: rt}, CheckRedirect: base.CheckRedirect, Jar: base.Jar}
		v03 := *c.hc
		v03.Transport = v03Errors{base: c.hc.Transport}
		c.v03hc = &v03
	})
	return c.hc
}

func (c *Client) firstByteTimeout() time.Duration {
	if c.FirstByteTimeout > 0 {
		return c.FirstByteTimeout
	}
	return agent.DefaultFirstByteTimeout
}

func (c *Client) idleTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return agent.DefaultIdleTimeout
}

// Invoker is the run manager's Invoker for every agent: A2A agents
// (InvokeRequest.Protocol "a2a") through A2A, the others through Agents.
type Invoker struct {
	Agents *agent.Client
	A2A    *Client
}

// Invoke picks the protocol.
func (i *Invoker) Invoke(ctx context.Context, endpoint string, req agent.InvokeRequest, h func(agent.StreamEvent) error) (*agent.Result, error) {
	if req.Protocol == store.ProtocolA2A {
		return i.A2A.Invoke(ctx, endpoint, req, h)
	}
	return i.Agents.Invoke(ctx, endpoint, req, h)
}

// Invoke runs one turn of a remote A2A agent: it sends the run's input as
// a message — continuing req.RemoteTaskID when the run resumes an
// input-required task, in req.RemoteContextID when there is one — and
// maps what comes back onto the run: the task's ids (a "remote_task"
// event, recorded so a resumed run continues the task), text artifacts
// and a direct message's text as deltas, working statuses with a message
// as states, input-required as the Result's InputRequired, completed as
// done, failed/canceled/rejected/auth-required as agent_error. It streams
// when the card says the agent can, else sends and waits for the task.
//
// If ctx ends (the run was cancelled or ended) while the remote task runs,
// tasks/cancel is sent to the remote agent before Invoke returns.
func (c *Client) Invoke(ctx context.Context, _ string, req agent.InvokeRequest, h func(agent.StreamEvent) error) (*agent.Result, error) {
	card, err := parseCard(req.Card)
	if err != nil {
		return nil, err
	}
	client, err := c.newClient(ctx, card)
	if err != nil {
		return nil, err
	}
	defer client.Destroy()

	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(req.InputMessage.Content))
	msg.TaskID = a2a.TaskID(req.RemoteTaskID)
	msg.ContextID = req.RemoteContextID
	tp := req.Traceparent
	if tp == "" {
		tp = agent.NewTraceparent()
	}
	params := runParams(tp, req.RunID, req.SessionID)

	st := &callState{}
	callCtx, cancel := context.WithCancelCause(withState(ctx, st))
	defer cancel(nil)
	callCtx = a2aclient.AttachServiceParams(callCtx, params)
	wd := newWatchdog(cancel, c.firstByteTimeout(), c.idleTimeout(), req.Paused)
	defer wd.stop()
	st.activity = wd.activity

	m := &mapper{h: h, wd: wd}
	if card.Capabilities.Streaming {
		err = m.stream(callCtx, client, &a2a.SendMessageRequest{Message: msg})
	} else {
		err = m.send(callCtx, client, &a2a.SendMessageRequest{Message: msg})
	}
	// A tasks/cancel carries the run's headers too, so the remote can tell
	// which run (and trace) it ends.
	ctx = a2aclient.AttachServiceParams(ctx, params)
	if ctx.Err() != nil {
		// The run ended here: the remote task is ended too.
		c.cancelRemote(ctx, client, m)
		return nil, fmt.Errorf("a2a: invoke cancelled: %w", ctx.Err())
	}
	if err != nil {
		var handlerErr *handlerError
		if errors.As(err, &handlerErr) {
			c.cancelRemote(ctx, client, m)
			return nil, handlerErr.err
		}
		err = st.classify(callCtx, err)
		if ie, ok := err.(*agent.InvokeError); ok && ie.Code == agent.CodeAgentTimeout {
			c.cancelRemote(ctx, client, m)
		}
		return nil, err
	}
	if m.result == nil {
		if !st.streamed() && card.Capabilities.Streaming {
			return nil, &agent.InvokeError{Code: agent.CodeAgentProtocolError, Message: "the A2A agent did not answer the stream with text/event-stream"}
		}
		return nil, &agent.InvokeError{Code: agent.CodeAgentDisconnected, Message: "the A2A agent's stream ended before the task completed, failed or asked for input"}
	}
	if m.result.err != nil {
		return nil, m.result.err
	}
	return m.result.res, nil
}

// newClient is an A2A client for the agent card describes.
func (c *Client) newClient(ctx context.Context, card *a2a.AgentCard) (*a2aclient.Client, error) {
	hc := c.http()
	client, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(hc),
		a2aclient.WithCompatTransport(a2av0.Version, a2a.TransportProtocolJSONRPC, a2av0.NewJSONRPCTransportFactory(a2av0.JSONRPCTransportConfig{Client: c.v03hc})),
	)
	if err != nil {
		return nil, &agent.InvokeError{Code: agent.CodeAgentProtocolError, Message: "the agent card offers no interface agentplane can use: " + err.Error(), Err: err}
	}
	return client, nil
}

// cancelRemote sends tasks/cancel for the task m saw, if it has not ended.
func (c *Client) cancelRemote(ctx context.Context, client *a2aclient.Client, m *mapper) {
	if m.taskID == "" || m.result != nil {
		return
	}
	c.sendCancel(ctx, client, m.taskID)
}

func (c *Client) sendCancel(ctx context.Context, client *a2aclient.Client, taskID string) error {
	d := c.CancelTimeout
	if d <= 0 {
		d = 5 * time.Second
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	_, err := client.CancelTask(cctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(taskID)})
	return err
}

// runParams are the headers of every A2A request made for a run.
func runParams(traceparent, runID, sessionID string) a2aclient.ServiceParams {
	return a2aclient.ServiceParams{"traceparent": {traceparent}, "x-run-id": {runID}, "x-session-id": {sessionID}}
}

// CancelTask sends tasks/cancel for a remote task of the agent whose card
// (as registered) is given: what the process driving a run sends when the
// run ends while the task runs, sent instead by the process that fails the
// run after its driver died (run.Manager's orphan sweep). It carries the
// run's headers as the run's other requests did (a trace of its own: the
// dead process's spans are gone).
func (c *Client) CancelTask(ctx context.Context, cardJSON json.RawMessage, taskID, runID, sessionID string) error {
	card, err := parseCard(cardJSON)
	if err != nil {
		return err
	}
	client, err := c.newClient(ctx, card)
	if err != nil {
		return err
	}
	defer client.Destroy()
	return c.sendCancel(a2aclient.AttachServiceParams(ctx, runParams(agent.NewTraceparent(), runID, sessionID)), client, taskID)
}

// CancelRemoteTask is Client.CancelTask (run.Manager finds it on its
// Invoker).
func (i *Invoker) CancelRemoteTask(ctx context.Context, card json.RawMessage, taskID, runID, sessionID string) error {
	return i.A2A.CancelTask(ctx, card, taskID, runID, sessionID)
}

// handlerError is an error of the run's handler, returned as it is.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }

// outcome is how the remote turn ended.
type outcome struct {
	res *agent.Result
	err error
}

// mapper maps A2A events onto the run's stream.
type mapper struct {
	h        func(agent.StreamEvent) error
	wd       *watchdog
	taskID   string
	ctxID    string
	artifact bool // text came as artifacts (a completed status's message is then not the answer)
	result   *outcome
}

func (m *mapper) emit(ev agent.StreamEvent) error {
	m.wd.pause()
	defer m.wd.resume()
	if err := m.h(ev); err != nil {
		return &handlerError{err}
	}
	return nil
}

// ids records the remote task's ids, once.
func (m *mapper) ids(taskID a2a.TaskID, contextID string) error {
	if taskID == "" || (string(taskID) == m.taskID && contextID == m.ctxID) {
		return nil
	}
	m.taskID, m.ctxID = string(taskID), contextID
	return m.emit(agent.StreamEvent{Type: "remote_task", RemoteTaskID: m.taskID, RemoteContextID: m.ctxID})
}

func (m *mapper) stream(ctx context.Context, client *a2aclient.Client, req *a2a.SendMessageRequest) error {
	for ev, err := range client.SendStreamingMessage(ctx, req) {
		if err != nil {
			return err
		}
		m.wd.resume() // an event arrived: the idle clock from here on
		if err := m.event(ev); err != nil {
			return err
		}
		if m.result != nil {
			return nil
		}
	}
	return nil
}

func (m *mapper) send(ctx context.Context, client *a2aclient.Client, req *a2a.SendMessageRequest) error {
	res, err := client.SendMessage(ctx, req)
	if err != nil {
		return err
	}
	m.wd.resume()
	switch r := res.(type) {
	case *a2a.Task:
		return m.event(r)
	case *a2a.Message:
		return m.event(r)
	}
	return fmt.Errorf("unexpected result %T", res)
}

// event maps one A2A event.
func (m *mapper) event(ev a2a.Event) error {
	switch e := ev.(type) {
	case *a2a.Message:
		if err := m.text(e.Parts); err != nil {
			return err
		}
		m.result = &outcome{res: &agent.Result{}}
		return nil
	case *a2a.Task:
		if err := m.ids(e.ID, e.ContextID); err != nil {
			return err
		}
		for _, a := range e.Artifacts {
			if a == nil {
				continue
			}
			m.artifact = true
			if err := m.text(a.Parts); err != nil {
				return err
			}
		}
		return m.status(e.Status)
	case *a2a.TaskStatusUpdateEvent:
		if err := m.ids(e.TaskID, e.ContextID); err != nil {
			return err
		}
		return m.status(e.Status)
	case *a2a.TaskArtifactUpdateEvent:
		if err := m.ids(e.TaskID, e.ContextID); err != nil {
			return err
		}
		if e.Artifact == nil {
			return nil
		}
		m.artifact = true
		return m.text(e.Artifact.Parts)
	}
	return fmt.Errorf("unexpected event %T", ev)
}

// text emits a delta with the parts' text (data parts as JSON).
func (m *mapper) text(parts a2a.ContentParts) error {
	var b strings.Builder
	for _, p := range parts {
		if p == nil {
			continue
		}
		switch p.Content.(type) {
		case a2a.Text:
			b.WriteString(p.Text())
		case a2a.Data:
			j, _ := json.Marshal(p.Data())
			b.Write(j)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return m.emit(agent.StreamEvent{Type: "delta", Text: b.String()})
}

// status maps the task's state.
func (m *mapper) status(s a2a.TaskStatus) error {
	text := messageText(s.Message)
	switch s.State {
	case a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateUnspecified:
		if text == "" {
			return nil
		}
		detail, _ := json.Marshal(map[string]string{"message": text})
		return m.emit(agent.StreamEvent{Type: "state", State: "remote_" + stateName(s.State), Detail: detail})
	case a2a.TaskStateCompleted:
		if !m.artifact && text != "" {
			// An agent that answers in its final status message.
			if err := m.emit(agent.StreamEvent{Type: "delta", Text: text}); err != nil {
				return err
			}
		}
		m.result = &outcome{res: &agent.Result{}}
	case a2a.TaskStateInputRequired:
		q := text
		if q == "" {
			q = "The agent needs more input."
		}
		detail := map[string]any{"remote_task_id": m.taskID, "remote_context_id": m.ctxID}
		if d := messageData(s.Message); d != nil {
			detail["data"] = d
		}
		b, _ := json.Marshal(detail)
		m.result = &outcome{res: &agent.Result{InputRequired: &agent.InputRequest{Question: q, Detail: b}}}
	case a2a.TaskStateFailed, a2a.TaskStateCanceled, a2a.TaskStateRejected, a2a.TaskStateAuthRequired:
		msg := "the A2A agent's task ended " + stateName(s.State)
		if text != "" {
			msg += ": " + text
		}
		m.result = &outcome{err: &agent.InvokeError{Code: agent.CodeAgentError, Message: msg}}
	default:
		m.result = &outcome{err: &agent.InvokeError{Code: agent.CodeAgentProtocolError, Message: fmt.Sprintf("the A2A agent sent an unknown task state %.64q", string(s.State))}}
	}
	return nil
}

// stateName is the state without the proto prefix ("working").
func stateName(s a2a.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(string(s), "TASK_STATE_"))
}

func messageText(msg *a2a.Message) string {
	if msg == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range msg.Parts {
		if p != nil {
			b.WriteString(p.Text())
		}
	}
	return b.String()
}

func messageData(msg *a2a.Message) []any {
	if msg == nil {
		return nil
	}
	var out []any
	for _, p := range msg.Parts {
		if p != nil {
			if d := p.Data(); d != nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// remoteErrorText is how the remote agent's JSON-RPC error reads in the
// run's error, or false when err is none: its A2A reason and message,
// then the cause a2a-go v0.3 servers put in data.error — for an
// executor's own error their message is only "internal error".
func remoteErrorText(err error) (string, bool) {
	var ae *a2a.Error
	if !errors.As(err, &ae) {
		return "", false
	}
	msg := ae.Error()
	if cause, _ := ae.Details["error"].(string); cause != "" && cause != msg {
		msg += ": " + cause
	}
	return a2a.ErrorReason(ae.Err) + ": " + msg, true
}
