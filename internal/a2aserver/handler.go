package a2aserver

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// handler implements the library's a2asrv.RequestHandler over the run
// manager: the JSON-RPC bindings (v1.0 and v0.3) decode requests and call
// it with the request's context, which carries the call (user, agent).
type handler struct{ s *Server }

// SendMessage: a blocking send answers the task once it has ended or waits
// for input (or at once with returnImmediately / blocking:false).
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	c := callFrom(ctx)
	t, f, err := h.s.begin(ctx, c, req)
	if err != nil {
		return nil, h.s.rpcError(ctx, err)
	}
	if f != nil {
		defer f.close()
		if req.Config == nil || !req.Config.ReturnImmediately {
			for done := false; !done; {
				if _, done, err = f.next(ctx); err != nil {
					return nil, h.s.rpcError(ctx, err)
				}
			}
		}
	}
	if f != nil && f.ended != nil {
		// The run this request started ended as it watched: the task is
		// what it saw, with nothing to read back.
		t = t.endedAs(f)
	} else {
		first := t.firstSeq
		if t, err = h.s.loadTask(ctx, c, a2a.TaskID(t.id)); err != nil {
			return nil, h.s.rpcError(ctx, err)
		}
		t.firstSeq = first
	}
	snap, err := h.s.snapshot(ctx, t)
	if err != nil {
		return nil, h.s.rpcError(ctx, err)
	}
	return trimHistory(snap, historyLength(req.Config)), nil
}

// SendStreamingMessage streams the task: its snapshot first, then its
// run's events until the run ends or waits for input.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c := callFrom(ctx)
		t, f, err := h.s.begin(ctx, c, req)
		if err != nil {
			yield(nil, h.s.rpcError(ctx, err))
			return
		}
		if f != nil {
			defer f.close()
			f.whole = false // a stream answers as it goes: nothing to keep
		}
		snap, err := h.s.snapshot(ctx, t)
		if err != nil {
			yield(nil, h.s.rpcError(ctx, err))
			return
		}
		if f != nil && f.check {
			// Answered: the task works again until the follower says
			// otherwise, and the follower goes on from the snapshot's
			// artifacts (it follows from the session's end as it was).
			snap.Status = a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: snap.Status.Timestamp}
			f.continueFrom(snap)
		}
		if !yield(snap, nil) || f == nil {
			return
		}
		h.s.stream(ctx, f, yield)
	}
}

// stream yields f's events until the last.
func (s *Server) stream(ctx context.Context, f *follower, yield func(a2a.Event, error) bool) {
	for {
		evs, done, err := f.next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				yield(nil, s.rpcError(ctx, err))
			}
			return
		}
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
		if done {
			return
		}
	}
}

// GetTask rebuilds the task from its runs.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	t, err := h.s.loadTask(ctx, callFrom(ctx), req.ID)
	if err != nil {
		return nil, h.s.rpcError(ctx, err)
	}
	snap, err := h.s.snapshot(ctx, t)
	if err != nil {
		return nil, h.s.rpcError(ctx, err)
	}
	return trimHistory(snap, req.HistoryLength), nil
}

// CancelTask cancels the task's running run (and its children) as its
// user. A task whose run has ended — an input-required one included: no
// work is running, it waits for an answer that need never come — is not
// cancelable.
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	c := callFrom(ctx)
	t, err := h.s.loadTask(ctx, c, req.ID)
	if err != nil {
		return nil, h.s.rpcError(ctx, err)
	}
	if store.RunIsTerminal(t.latest().Status) {
		return nil, a2a.NewError(a2a.ErrTaskNotCancelable, "the task's run "+t.latest().RunID+" is "+t.latest().Status)
	}
	if _, err := h.s.opts.Runs.Cancel(ctx, run.CancelParams{RunID: t.latest().RunID, UserID: c.userID, Reason: "tasks/cancel over A2A"}); err != nil {
		if errors.Is(err, run.ErrRunNotActive) {
			return nil, a2a.NewError(a2a.ErrTaskNotCancelable, "the task's run has already ended")
		}
		return nil, h.s.rpcError(ctx, err)
	}
	return h.GetTask(ctx, &a2a.GetTaskRequest{ID: req.ID})
}

// SubscribeToTask streams a task again: its snapshot, then, while its run
// is active and not waiting for input, the run's events from now on.
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c := callFrom(ctx)
		t, err := h.s.loadTask(ctx, c, req.ID)
		if err != nil {
			yield(nil, h.s.rpcError(ctx, err))
			return
		}
		var f *follower
		if !store.RunIsTerminal(t.latest().Status) {
			// From the session's end as it is now: the snapshot read after
			// it includes everything before.
			sess, err := h.s.st.SessionGet(ctx, t.sessionID())
			if err != nil {
				yield(nil, h.s.rpcError(ctx, err))
				return
			}
			// The runs read again, after the session's end: the run may
			// have ended between the two reads, its end at or before
			// LastSeq, and a snapshot still saying working would leave the
			// stream waiting for an end that will never come after it.
			if t, err = h.s.loadTask(ctx, c, req.ID); err != nil {
				yield(nil, h.s.rpcError(ctx, err))
				return
			}
			if !store.RunIsTerminal(t.latest().Status) {
				t.upToSeq = sess.LastSeq
				f = h.s.follow(t, sess.LastSeq, false, h.s.hold(ctx, c, t.sessionID()))
				defer f.close()
				// The runs below the root, read after LastSeq: one created
				// before it and still waiting on its own child says nothing
				// the follower would learn it from.
				if err := f.loadTree(ctx); err != nil {
					yield(nil, h.s.rpcError(ctx, err))
					return
				}
			}
			// Ended meanwhile: no follower, and the snapshot is not capped —
			// what the run committed after LastSeq is in it, or nobody sends it.
		}
		snap, err := h.s.snapshot(ctx, t)
		if err != nil {
			yield(nil, h.s.rpcError(ctx, err))
			return
		}
		if !yield(snap, nil) || f == nil || snap.Status.State != a2a.TaskStateWorking {
			return
		}
		f.continueFrom(snap)
		h.s.stream(ctx, f, yield)
	}
}

// ListTasks is not offered: a user's tasks are their sessions' intentions,
// listed by the sessions API.
func (h *handler) ListTasks(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, a2a.ErrUnsupportedOperation
}

func (h *handler) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return a2a.ErrPushNotificationNotSupported
}

func (h *handler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.ErrExtendedCardNotConfigured
}

// begin does what a message asks and returns its task and, when there is
// a run to follow, a follower of it:
//
//   - no taskId: a new task — a new root run in a new intention, in the
//     session named by contextId (created if new) or a new session;
//   - the taskId of a task whose run asked for input: the answer — a run
//     resuming it, in the same intention (the task keeps its id);
//   - the taskId of a task whose run waits for an approval or a client
//     tool: the message's data parts answer them (toolsvc), and the same
//     run is followed on;
//   - a task that has ended: refused.
func (s *Server) begin(ctx context.Context, c *call, req *a2a.SendMessageRequest) (*task, *follower, error) {
	if req == nil || req.Message == nil || len(req.Message.Parts) == 0 {
		return nil, nil, a2a.NewError(a2a.ErrInvalidParams, "the message needs at least one part")
	}
	m := req.Message
	if m.Role != "" && m.Role != a2a.MessageRoleUser {
		return nil, nil, a2a.NewError(a2a.ErrInvalidParams, "the message's role must be user")
	}
	text, answers, err := splitParts(m.Parts)
	if err != nil {
		return nil, nil, err
	}
	if m.TaskID == "" {
		if text == "" {
			return nil, nil, a2a.NewError(a2a.ErrInvalidParams, "a new task needs a text part")
		}
		sessionID := m.ContextID
		if sessionID == "" {
			sessionID = ids.New("ses")
		}
		return s.start(ctx, c, run.StartParams{UserID: c.userID, SessionID: sessionID, AgentID: c.agent.AgentID, Agent: c.agent, RequestID: m.ID,
			Message: agent.Message{Role: "user", Content: text}, NewIntention: true})
	}
	t, err := s.loadTask(ctx, c, m.TaskID)
	if err != nil {
		return nil, nil, err
	}
	if m.ContextID != "" && m.ContextID != t.sessionID() {
		return nil, nil, a2a.NewError(a2a.ErrInvalidParams, "the contextId is not the task's")
	}
	last := t.latest()
	switch {
	case last.Status == store.RunInputRequired:
		if text == "" {
			return nil, nil, a2a.NewError(a2a.ErrInvalidParams, "the task asked a question: answer with a text part")
		}
		return s.start(ctx, c, run.StartParams{UserID: c.userID, SessionID: last.SessionID, AgentID: c.agent.AgentID, Agent: c.agent, RequestID: m.ID,
			Message: agent.Message{Role: "user", Content: text}, ResumeRunID: last.RunID})
	case store.RunIsTerminal(last.Status):
		return nil, nil, errTerminal(last)
	}
	if len(answers) == 0 {
		return nil, nil, a2a.NewError(a2a.ErrInvalidParams, "the task is working: answer what it asked for with data parts, or get it with tasks/get")
	}
	sess, err := s.st.SessionGet(ctx, last.SessionID)
	if err != nil {
		return nil, nil, err
	}
	release := s.hold(ctx, c, last.SessionID)
	for _, a := range answers {
		if err := s.answer(ctx, c, a); err != nil {
			release()
			return nil, nil, err
		}
	}
	t.upToSeq = sess.LastSeq
	return t, s.follow(t, sess.LastSeq, true, release), nil
}

// start starts (or resumes) a run for a message and follows it from its
// first event; the request counts as the session's client meanwhile.
func (s *Server) start(ctx context.Context, c *call, p run.StartParams) (*task, *follower, error) {
	// The hold is recorded while the run's start commits, and before the
	// run invokes its agent (whose client tools may be asked of another
	// process): not one after the other on the request's path.
	recorded, release := s.holdAsync(c, p.SessionID)
	p.BeforeInvoke = recorded
	// Subscribed before the run's first events commit, the follower gets
	// them, and the rest, as they commit, without reading them back.
	sub := s.opts.Log.SubscribeLive(p.SessionID)
	started, err := s.opts.Runs.StartRun(ctx, p)
	if err != nil {
		sub.Close()
		release()
		return nil, nil, err
	}
	sub.StartAfter(started.Events[0].Seq - 1)
	// Done by now as a rule (one statement against the start's several);
	// and a queued run, which invokes its agent only once admitted, keeps
	// no BeforeInvoke.
	recorded(ctx)
	t := &task{id: started.Run.IntentionID, runs: []*store.Run{started.Run}}
	if started.Run.ResumesRunID != "" {
		// An answer: the task's earlier runs belong to its history.
		if t, err = s.loadTask(ctx, c, a2a.TaskID(started.Run.IntentionID)); err != nil {
			sub.Close()
			release()
			return nil, nil, err
		}
	}
	t.firstSeq = map[string]int64{started.Run.RunID: started.Events[0].Seq}
	f := s.followOn(t, sub, false, release)
	f.whole = true
	return t, f, nil
}

// hold counts the request as a client of sessionID (Options.Hold), once
// other processes can see it.
func (s *Server) hold(ctx context.Context, c *call, sessionID string) func() {
	recorded, release := s.holdAsync(c, sessionID)
	recorded(ctx)
	return release
}

// holdAsync counts the request as a client of sessionID from now on;
// recorded waits until other processes can see it. Not for a remote A2A
// agent served on: its runs ask for no client tool (it holds no run token
// to call tools with), so there is nothing to hold the session for — and
// the hold is two writes to the store per request (presence on, off).
func (s *Server) holdAsync(c *call, sessionID string) (recorded func(context.Context), release func()) {
	if s.opts.Hold == nil || c.agent.Protocol == store.ProtocolA2A {
		return func(context.Context) {}, func() {}
	}
	return s.opts.Hold(sessionID)
}

// answer is one data part answering what a task waits for.
type answer struct {
	ApprovalID string          `json:"approval_id"`
	Decision   string          `json:"decision"`
	Reason     string          `json:"reason"`
	ToolCallID string          `json:"tool_call_id"`
	OK         *bool           `json:"ok"`
	Result     json.RawMessage `json:"result"`
	Error      json.RawMessage `json:"error"`
}

// splitParts joins the text parts and decodes the data parts as answers.
func splitParts(parts a2a.ContentParts) (string, []answer, error) {
	var texts []string
	var answers []answer
	for _, p := range parts {
		if p == nil {
			continue
		}
		switch p.Content.(type) {
		case a2a.Text:
			texts = append(texts, p.Text())
		case a2a.Data:
			b, _ := json.Marshal(p.Data())
			var a answer
			if json.Unmarshal(b, &a) != nil || (a.ApprovalID == "" && a.ToolCallID == "") {
				return "", nil, a2a.NewError(a2a.ErrInvalidParams, `a data part must answer an approval {approval_id, decision, reason?} or a client tool {tool_call_id, ok, result|error}`)
			}
			if a.ToolCallID != "" && a.ApprovalID == "" && a.OK == nil {
				return "", nil, a2a.NewError(a2a.ErrInvalidParams, "a client tool's answer needs ok")
			}
			answers = append(answers, a)
		default:
			return "", nil, a2a.NewError(a2a.ErrUnsupportedContentType, "only text and data parts are accepted")
		}
	}
	return strings.Join(texts, "\n"), answers, nil
}

// answer hands one answer to the tool service, as the task's user.
func (s *Server) answer(ctx context.Context, c *call, a answer) error {
	if s.opts.Tools == nil {
		return a2a.NewError(a2a.ErrUnsupportedOperation, "tool calls are not enabled")
	}
	if a.ApprovalID != "" {
		_, err := s.opts.Tools.Decide(ctx, toolsvc.DecideParams{ApprovalID: a.ApprovalID, UserID: c.userID, Decision: a.Decision, Reason: a.Reason})
		return err
	}
	errJSON := a.Error
	if !*a.OK && (len(errJSON) == 0 || errJSON[0] != '{') {
		errJSON = json.RawMessage(`{"code":"client_error","message":"the A2A client could not run the tool"}`)
	}
	_, err := s.opts.Tools.SubmitClientResult(ctx, toolsvc.ClientResult{UserID: c.userID, ToolCallID: a.ToolCallID, OK: *a.OK, Result: a.Result, Error: errJSON})
	return err
}

// rpcError turns an error into one the JSON-RPC bindings answer: A2A
// errors as they are, the platform's refusals (respond.Error) with their
// code in the message and the details, anything else as an internal error
// (logged, its text not shown).
func (s *Server) rpcError(ctx context.Context, err error) error {
	var ae *a2a.Error
	if errors.As(err, &ae) || isA2ASentinel(err) {
		return err
	}
	if e := respond.As(err); e != nil {
		kind := a2a.ErrInvalidRequest
		switch {
		case e.Status == http.StatusBadRequest, e.Status == http.StatusNotFound:
			kind = a2a.ErrInvalidParams
		case e.Status == http.StatusServiceUnavailable:
			kind = a2a.ErrServerError
		case e.Status == http.StatusForbidden:
			kind = a2a.ErrUnauthorized
		}
		details := map[string]any{"code": e.Code}
		for k, v := range e.Details {
			details[k] = v
		}
		return a2a.NewError(kind, e.Code+": "+e.Message).WithDetails(details)
	}
	if ctx.Err() == nil {
		s.opts.Logger.Error("a2a request failed", "err", err)
	}
	return a2a.NewError(a2a.ErrInternalError, "internal error")
}

func isA2ASentinel(err error) bool {
	for _, e := range []error{a2a.ErrTaskNotFound, a2a.ErrTaskNotCancelable, a2a.ErrInvalidParams, a2a.ErrUnsupportedOperation,
		a2a.ErrPushNotificationNotSupported, a2a.ErrExtendedCardNotConfigured, a2a.ErrServerError, a2a.ErrUnsupportedContentType} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// historyLength is the history a send asks for (nil: all).
func historyLength(cfg *a2a.SendMessageConfig) *int {
	if cfg == nil {
		return nil
	}
	return cfg.HistoryLength
}

// trimHistory keeps the newest n messages of the history.
func trimHistory(t *a2a.Task, n *int) *a2a.Task {
	if n != nil && *n >= 0 && *n < len(t.History) {
		t.History = t.History[len(t.History)-*n:]
	}
	return t
}
