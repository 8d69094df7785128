package a2aserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// follower turns a run's events, read from the session log as they
// commit, into the task's A2A events, until the run ends or waits for its
// client (an approval or a client tool, at any depth of its tree).
type follower struct {
	s       *Server
	t       *task
	root    *store.Run
	sub     *eventlog.Subscription
	tree    map[string]bool // the root and every run below it seen so far
	chunked map[string]bool // runs whose output artifact has begun
	release func()
	// check: before the first event, say input-required at once if the
	// tree already waits for something (after an answer, another approval
	// may be pending).
	check bool
	done  bool
	// whole: following from the root's first event (a run this request
	// started), so own holds every event of the root when it ends; ended
	// says it ended done or asking for input, and how (its last event).
	whole bool
	own   []store.Event
	ended *store.Event
}

// follow starts following t's latest run after afterSeq. release (may be
// nil) is called by close.
func (s *Server) follow(t *task, afterSeq int64, check bool, release func()) *follower {
	return s.followOn(t, s.opts.Log.Subscribe(t.latest().SessionID, afterSeq), check, release)
}

// followOn follows t's latest run on sub, a subscription to its session.
func (s *Server) followOn(t *task, sub *eventlog.Subscription, check bool, release func()) *follower {
	root := t.latest()
	return &follower{s: s, t: t, root: root, sub: sub,
		tree: map[string]bool{root.RunID: true}, chunked: map[string]bool{}, release: release, check: check}
}

// continueFrom makes the follower's chunks append to the artifacts snap
// (sent to the client first) already holds: a follower that starts from
// the session's end as it was — a resubscription, an answer's stream —
// sends only what comes after, and its first chunk of a run whose output
// began before must not replace that output (A2A: append false replaces).
func (f *follower) continueFrom(snap *a2a.Task) {
	for _, a := range snap.Artifacts {
		f.chunked[string(a.ID)] = true
	}
}

// loadTree adds every run of the root's tree as it is now: a follower
// that starts from the session's end (a resubscription, an answer's
// stream) would otherwise drop the events of a run created before that end
// whose parent is silent meanwhile — a grandchild's approval or client tool
// while its parent waits on it — and never say input-required.
func (f *follower) loadTree(ctx context.Context) error {
	tree, err := f.s.st.RunListTree(ctx, f.root.RootRunID)
	if err != nil {
		return err
	}
	for _, r := range tree {
		f.tree[r.RunID] = true
	}
	return nil
}

// end marks the root's end (done, or asking for input) as the follower's
// last event.
func (f *follower) end() {
	f.done = true
	if f.whole {
		f.ended = &f.own[len(f.own)-1]
	}
}

func (f *follower) close() {
	f.sub.Close()
	if f.release != nil {
		f.release()
	}
}

// next returns the next A2A events; done is true after the last one.
func (f *follower) next(ctx context.Context) (evs []a2a.Event, done bool, err error) {
	if f.done {
		return nil, true, nil
	}
	if f.check {
		f.check = false
		_ = f.loadTree(ctx) // best effort: the tree also grows as its runs' events come
		m, err := f.s.waitingFor(ctx, f.t)
		if err != nil {
			return nil, false, err
		}
		if m != nil {
			f.done = true
			return []a2a.Event{a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateInputRequired, m)}, true, nil
		}
	}
	for len(evs) == 0 && !f.done {
		batch, err := f.sub.Next(ctx)
		if err != nil {
			if errors.Is(err, eventlog.ErrSubscriptionClosed) {
				return nil, false, a2a.NewError(a2a.ErrServerError, "the platform is shutting down; get the task again from another replica or later")
			}
			return nil, false, err
		}
		for i := range batch {
			if ev := f.translate(&batch[i]); ev != nil {
				evs = append(evs, ev)
			}
			if f.done {
				break
			}
		}
	}
	return evs, f.done, nil
}

// translate maps one logged event of the session to the task's A2A event,
// or nil.
func (f *follower) translate(e *store.Event) a2a.Event {
	if !f.tree[e.RunID] {
		if e.ParentRunID == "" || !f.tree[e.ParentRunID] {
			return nil // another run of the session
		}
		f.tree[e.RunID] = true
	}
	own := e.RunID == f.root.RunID
	if own && f.whole {
		f.own = append(f.own, *e)
	}
	switch e.Type {
	case eventlog.TypeAgentStreamDelta:
		if !own {
			return nil
		}
		var p struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		ev := &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(f.t.id), ContextID: f.t.sessionID(), Append: f.chunked[e.RunID],
			Artifact: &a2a.Artifact{ID: a2a.ArtifactID(e.RunID), Name: "output", Parts: a2a.ContentParts{a2a.NewTextPart(p.Text)}}}
		f.chunked[e.RunID] = true
		return ev
	case eventlog.TypeState:
		var p struct {
			State  string          `json:"state"`
			Detail json.RawMessage `json:"detail"`
			Source string          `json:"source"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		if !own || p.Source == eventlog.StateSourcePlatform {
			return nil // the platform's pauses come as input-required below
		}
		parts := []*a2a.Part{a2a.NewTextPart(p.State)}
		if d := decodeObject(p.Detail); len(d) > 0 {
			parts = append(parts, a2a.NewDataPart(map[string]any{"state": p.State, "detail": d}))
		}
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateWorking, a2a.NewMessageForTask(a2a.MessageRoleAgent, f.t, parts...))
	case eventlog.TypeApprovalCreated:
		f.done = true
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateInputRequired, pendingMessage(f.t, "approval_required", e.Payload, e.RunID))
	case eventlog.TypeToolRequest:
		f.done = true
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateInputRequired, pendingMessage(f.t, "tool_request", e.Payload, e.RunID))
	case eventlog.TypeRunDone:
		if !own {
			return nil
		}
		f.end()
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateCompleted, nil)
	case eventlog.TypeRunFailed:
		if !own {
			return nil
		}
		f.done = true
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateFailed, errorMessage(f.t, e.Payload))
	case eventlog.TypeRunCancelled:
		if !own {
			return nil
		}
		f.done = true
		var p struct {
			Detail struct {
				Reason string `json:"reason"`
			} `json:"detail"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		b, _ := json.Marshal(map[string]string{"code": "cancelled", "message": p.Detail.Reason})
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateCanceled, errorMessage(f.t, b))
	case eventlog.TypeInputRequired:
		if !own {
			return nil
		}
		f.end()
		return a2a.NewStatusUpdateEvent(f.t, a2a.TaskStateInputRequired, questionMessage(f.t, e.Payload))
	}
	return nil
}
