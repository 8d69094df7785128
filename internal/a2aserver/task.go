package a2aserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// task is an A2A task as the runs hold it: the root runs of one intention,
// oldest first, all of one user, agent and session.
type task struct {
	id   string // the intention id
	runs []*store.Run
	// firstSeq: the seq of a run's first event where this request saw it
	// committed (the run it started), so its events are read in one
	// statement.
	firstSeq map[string]int64
	// seen: a run's events as this request followed them from its first
	// to its end, so the answer is built without reading them back.
	seen map[string][]store.Event
	// upToSeq, when set, caps the snapshot at the seq a follower started
	// after (a resubscription, an answer's stream): what committed later
	// is the follower's to send, not the snapshot's too.
	upToSeq int64
}

// endedAs is t as f saw its latest run end (done, or asking for input):
// that run's row as its end left it and its events, without reading the
// log back. f followed the run from its first event.
func (t *task) endedAs(f *follower) *task {
	r := *t.latest()
	e := f.ended
	r.EndedAt = e.TS
	switch e.Type {
	case eventlog.TypeRunDone:
		r.Status = store.RunDone
	case eventlog.TypeInputRequired:
		var p struct {
			Question string          `json:"question"`
			Detail   json.RawMessage `json:"detail"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		r.Status, r.Question, r.QuestionDetail = store.RunInputRequired, p.Question, p.Detail
	}
	out := &task{id: t.id, runs: append(slices.Clip(t.runs[:len(t.runs)-1]), &r), firstSeq: t.firstSeq,
		seen: map[string][]store.Event{r.RunID: f.own}}
	return out
}

func (t *task) latest() *store.Run { return t.runs[len(t.runs)-1] }
func (t *task) sessionID() string  { return t.runs[0].SessionID }

// TaskInfo lets a2a constructors fill taskId and contextId.
func (t *task) TaskInfo() a2a.TaskInfo {
	return a2a.TaskInfo{TaskID: a2a.TaskID(t.id), ContextID: t.sessionID()}
}

// loadTask reads the task id of c's user and agent; another user's task,
// or another agent's, is not found, exactly like one that never existed.
func (s *Server) loadTask(ctx context.Context, c *call, id a2a.TaskID) (*task, error) {
	if id == "" {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "the task id is missing")
	}
	all, err := s.st.RunListIntention(ctx, string(id))
	if err != nil {
		return nil, err
	}
	t := &task{id: string(id)}
	for _, r := range all {
		if r.ParentRunID == "" {
			t.runs = append(t.runs, r)
		}
	}
	if len(t.runs) == 0 || t.runs[0].UserID != c.userID || t.runs[0].AgentID != c.agent.AgentID {
		return nil, a2a.ErrTaskNotFound
	}
	return t, nil
}

// snapshot builds the task as A2A shows it: the user's messages and the
// agent's questions as history, each run's streamed output as an artifact
// (artifactId = its run id), and the latest run's state.
func (s *Server) snapshot(ctx context.Context, t *task) (*a2a.Task, error) {
	out := &a2a.Task{ID: a2a.TaskID(t.id), ContextID: t.sessionID(), History: []*a2a.Message{}}
	for _, r := range t.runs {
		evs, ok := t.seen[r.RunID]
		if !ok {
			var err error
			evs, err = s.st.EventsList(ctx, &store.EventsListParams{SessionID: r.SessionID, RunID: r.RunID, AfterSeq: max(t.firstSeq[r.RunID]-1, 0), Limit: 100000})
			if err != nil {
				return nil, err
			}
		}
		var text strings.Builder
		for _, e := range evs {
			if t.upToSeq > 0 && e.Seq > t.upToSeq {
				break // the follower sends it
			}
			switch e.Type {
			case eventlog.TypeUserInput:
				var p struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				}
				_ = json.Unmarshal(e.Payload, &p)
				m := a2a.NewMessageForTask(a2a.MessageRoleUser, t, a2a.NewTextPart(p.Message.Content))
				m.ID = e.EventID
				out.History = append(out.History, m)
			case eventlog.TypeAgentStreamDelta:
				var p struct {
					Text string `json:"text"`
				}
				_ = json.Unmarshal(e.Payload, &p)
				text.WriteString(p.Text)
			case eventlog.TypeInputRequired:
				m := questionMessage(t, e.Payload)
				m.ID = e.EventID
				out.History = append(out.History, m)
			}
		}
		if text.Len() > 0 {
			out.Artifacts = append(out.Artifacts, &a2a.Artifact{ID: a2a.ArtifactID(r.RunID), Name: "output", Parts: a2a.ContentParts{a2a.NewTextPart(text.String())}})
		}
	}
	st, err := s.status(ctx, t)
	if err != nil {
		return nil, err
	}
	out.Status = st
	return out, nil
}

// status is the task's state, from its latest run.
func (s *Server) status(ctx context.Context, t *task) (a2a.TaskStatus, error) {
	r := t.latest()
	at := time.Now().UTC()
	if r.EndedAt != 0 {
		at = time.UnixMilli(r.EndedAt).UTC()
	}
	st := a2a.TaskStatus{Timestamp: &at}
	switch r.Status {
	case store.RunDone:
		st.State = a2a.TaskStateCompleted
	case store.RunFailed:
		st.State = a2a.TaskStateFailed
		st.Message = errorMessage(t, r.Error)
	case store.RunCancelled:
		st.State = a2a.TaskStateCanceled
		st.Message = errorMessage(t, r.Error)
	case store.RunInputRequired:
		st.State = a2a.TaskStateInputRequired
		payload, _ := json.Marshal(map[string]any{"question": r.Question, "detail": r.QuestionDetail})
		st.Message = questionMessage(t, payload)
	default:
		st.State = a2a.TaskStateWorking
		waiting, err := s.waitingFor(ctx, t)
		if err != nil {
			return st, err
		}
		if waiting != nil {
			st.State = a2a.TaskStateInputRequired
			st.Message = waiting
		}
	}
	return st, nil
}

// waitingFor returns what the task's latest run (or a run below it) waits
// for from its client — the oldest pending approval or client tool — as
// an input-required message, or nil.
func (s *Server) waitingFor(ctx context.Context, t *task) (*a2a.Message, error) {
	if s.opts.Tools == nil {
		return nil, nil
	}
	r := t.latest()
	if r.Status != store.RunPausedWaitingApproval && r.Status != store.RunPausedWaitingTool && r.Status != store.RunRunning {
		return nil, nil
	}
	pending, err := s.opts.Tools.Pending(ctx, r.SessionID)
	if err != nil || len(pending) == 0 {
		return nil, err
	}
	tree, err := s.st.RunListTree(ctx, r.RootRunID)
	if err != nil {
		return nil, err
	}
	in := map[string]bool{}
	for _, x := range tree {
		in[x.RunID] = true
	}
	for _, p := range pending {
		runID, _ := p["run_id"].(string)
		if !in[runID] {
			continue
		}
		kind := "tool_request"
		if p["type"] == "approval_required" {
			kind = "approval_required"
		}
		b, _ := json.Marshal(p)
		return pendingMessage(t, kind, b, runID), nil
	}
	return nil, nil
}

// questionMessage is the agent's question ({question, detail?}) as an
// agent message: the question as text, the detail as a data part.
func questionMessage(t *task, payload json.RawMessage) *a2a.Message {
	var p struct {
		Question string          `json:"question"`
		Detail   json.RawMessage `json:"detail"`
	}
	_ = json.Unmarshal(payload, &p)
	parts := []*a2a.Part{a2a.NewTextPart(p.Question)}
	if d := decodeObject(p.Detail); d != nil {
		parts = append(parts, a2a.NewDataPart(d))
	}
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, t, parts...)
}

// errorMessage is a failed or cancelled run's {code, message} as an agent
// message: "code: message" as text and the object as a data part.
func errorMessage(t *task, errJSON json.RawMessage) *a2a.Message {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(errJSON, &e)
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, t, a2a.NewTextPart(e.Code+": "+e.Message),
		a2a.NewDataPart(map[string]any{"code": e.Code, "message": e.Message}))
}

// pendingMessage says what the client must answer for the task to go on
// (DESIGN §12): an approval ({kind:"approval_required", approval_id,
// tool_call_id, tool_name, args_summary, expires_at, run_id}) or a client
// tool ({kind:"tool_request", tool_call_id, tool_name, args, deadline_ts,
// run_id}), as a data part after a sentence saying so. payload is the
// approval_created or tool_request event's (or toolsvc.Pending's) object.
func pendingMessage(t *task, kind string, payload json.RawMessage, runID string) *a2a.Message {
	var m map[string]any
	_ = json.Unmarshal(payload, &m)
	data := map[string]any{"kind": kind, "run_id": runID}
	keys := []string{"tool_call_id", "tool_name", "args", "deadline_ts"}
	text := fmt.Sprintf("Run the client tool %v and answer with a data part {tool_call_id, ok, result} (or ok:false with error {code, message}).", m["tool_name"])
	if kind == "approval_required" {
		keys = []string{"approval_id", "tool_call_id", "tool_name", "args_summary", "expires_at"}
		text = fmt.Sprintf("Approve the call of %v (%v)? Answer with a data part {approval_id, decision: \"approve\"|\"reject\", reason?}.", m["tool_name"], m["args_summary"])
	}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			data[k] = v
		}
	}
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, t, a2a.NewTextPart(text), a2a.NewDataPart(data))
}

// decodeObject returns a JSON object as a map, or nil for anything else.
func decodeObject(b json.RawMessage) map[string]any {
	var m map[string]any
	if len(b) == 0 || json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// errTerminal answers a message sent to a task that has ended.
func errTerminal(r *store.Run) error {
	return a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("the task is in a terminal state (its run %s is %s); send a message without taskId to start a new task", r.RunID, r.Status))
}
