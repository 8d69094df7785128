package run

// Input required (issue 10, DESIGN §12) in the run manager: an agent ends
// its turn asking the user; the run ends INPUT_REQUIRED (terminal, not a
// failure, the session free again) and the next message to that agent
// resumes it in the same intention. Real HTTP agents, both stores.

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// weather asks "Which city?" unless its input names one; after asking it
// keeps talking, which the platform must ignore (it closes the request).
func weather(ctx context.Context, in invokeBody, out *sseOut) error {
	if !strings.Contains(in.InputMessage.Content, "Paris") {
		out.delta("Let me see. ")
		out.send("input_required", map[string]any{"question": "Which city?", "detail": map[string]any{"choices": []string{"Paris", "Oslo"}}})
		out.delta("ignored")
		out.done(nil)
		<-ctx.Done() // the platform closes the request after input_required
		return nil
	}
	out.delta("Sunny in Paris")
	return out.done(map[string]int{"total_tokens": 2})
}

func TestInputRequired(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		reg := metrics.New()
		h := newTreeHarness(t, dialect, Options{Metrics: reg})
		h.agent("w", nil, "", weather)
		h.agent("other", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error { return out.done(nil) })
		ctx := context.Background()

		first := h.start("w", "weather please")
		h.waitClosed(first.RunID)
		first = waitEnded(t, h.st, first.RunID)
		if first.Status != store.RunInputRequired || first.EndedAt == 0 || first.Question != "Which city?" ||
			!sameJSON(first.QuestionDetail, `{"choices":["Paris","Oslo"]}`) || len(first.Error) != 0 || first.IntentionID == "" || first.ResumesRunID != "" {
			t.Fatalf("first run = %+v", first)
		}
		evs := h.sessionEvents(first.SessionID)
		last := evs[len(evs)-1]
		if last.Type != eventlog.TypeInputRequired || !sameJSON(last.Payload, `{"question":"Which city?","detail":{"choices":["Paris","Oslo"]}}`) {
			t.Errorf("last event %s %s, want input_required", last.Type, last.Payload)
		}
		for _, e := range evs {
			switch e.Type {
			case eventlog.TypeAgentStreamDelta:
				if strings.Contains(string(e.Payload), "ignored") {
					t.Error("a delta after input_required was recorded")
				}
			case eventlog.TypeAgentInvokeDone:
				if !bytes.Contains(e.Payload, []byte(`"ok":true`)) || !bytes.Contains(e.Payload, []byte(`"input_required":true`)) {
					t.Errorf("agent_invoke_done %s", e.Payload)
				}
			case eventlog.TypeRunStarted:
				if !bytes.Contains(e.Payload, []byte(`"intention_id":"`+first.IntentionID+`"`)) {
					t.Errorf("run_started %s lacks the intention", e.Payload)
				}
			case eventlog.TypeRunFailed, eventlog.TypeRunDone:
				t.Errorf("%s for an INPUT_REQUIRED run", e.Type)
			}
		}
		msgs, _ := h.st.MessagesList(ctx, &store.MessagesListParams{SessionID: first.SessionID, Limit: 100})
		if len(msgs) != 2 || msgs[1].Role != "assistant" || msgs[1].Content != "Which city?" || msgs[0].IntentionID != first.IntentionID || msgs[1].IntentionID != first.IntentionID {
			t.Errorf("transcript %+v", msgs)
		}

		// The answer resumes it: same intention, resumes_run_id, the
		// question in the agent's messages.
		s, err := h.m.StartRun(ctx, StartParams{UserID: "alice", SessionID: first.SessionID, AgentID: "w", Message: agent.Message{Role: "user", Content: "Paris"}})
		if err != nil {
			t.Fatalf("the answer was refused: %v (an INPUT_REQUIRED run must leave the session free)", err)
		}
		second := waitEnded(t, h.st, s.Run.RunID)
		if second.Status != store.RunDone || second.ResumesRunID != first.RunID || second.IntentionID != first.IntentionID {
			t.Fatalf("second run = %+v", second)
		}
		h.mu.Lock()
		bodies := h.bodies["w"]
		h.mu.Unlock()
		if len(bodies) != 2 || bodies[0].IntentionID != first.IntentionID || bodies[0].ResumesRunID != "" ||
			bodies[1].IntentionID != first.IntentionID || bodies[1].ResumesRunID != first.RunID {
			t.Errorf("invoke bodies %+v", bodies)
		}
		if m := bodies[1].Messages; len(m) != 3 || m[1].Content != "Which city?" || m[2].Content != "Paris" {
			t.Errorf("the resumed run's messages %+v", m)
		}
		if !bytes.Contains(runEvents(t, h.st, second.RunID)[1].Payload, []byte(`"resumes_run_id":"`+first.RunID+`"`)) {
			t.Errorf("run_started of the answer lacks resumes_run_id")
		}
		// A run is answered once.
		if _, err := h.m.StartRun(ctx, StartParams{UserID: "alice", SessionID: first.SessionID, AgentID: "w", ResumeRunID: first.RunID,
			Message: agent.Message{Role: "user", Content: "Oslo"}}); codeOf(err) != "not_resumable" {
			t.Errorf("resuming an answered run: %v, want not_resumable", err)
		}

		// Asked again; new_intention starts afresh.
		third := waitEnded(t, h.st, h.startIn(first.SessionID, "w", "weather again", false).RunID)
		fourth := waitEnded(t, h.st, h.startIn(first.SessionID, "w", "weather in Paris", true).RunID)
		if third.Status != store.RunInputRequired || third.IntentionID == first.IntentionID || third.ResumesRunID != "" {
			t.Errorf("third = %+v: a new question after DONE is a new intention", third)
		}
		if fourth.ResumesRunID != "" || fourth.IntentionID == third.IntentionID || fourth.IntentionID == "" {
			t.Errorf("fourth (new_intention) = %+v", fourth)
		}
		// Another agent's message does not answer a question either.
		fifth := waitEnded(t, h.st, h.startIn(first.SessionID, "w", "weather", false).RunID)
		sixth := waitEnded(t, h.st, h.startIn(first.SessionID, "other", "hello", false).RunID)
		if sixth.ResumesRunID != "" || sixth.IntentionID == fifth.IntentionID {
			t.Errorf("another agent resumed: %+v", sixth)
		}
		// Explicit resume of something that is not waiting.
		if _, err := h.m.StartRun(ctx, StartParams{UserID: "alice", SessionID: first.SessionID, AgentID: "w", ResumeRunID: fourth.RunID,
			Message: agent.Message{Role: "user", Content: "x"}}); codeOf(err) != "not_resumable" {
			t.Errorf("resuming a DONE run: %v", err)
		}
		if _, err := h.m.StartRun(ctx, StartParams{UserID: "bob", SessionID: "", AgentID: "w", ResumeRunID: fifth.RunID,
			Message: agent.Message{Role: "user", Content: "x"}}); codeOf(err) != "not_resumable" {
			t.Errorf("resuming another session's run: %v", err)
		}
		var text strings.Builder
		reg.WriteText(&text)
		if !strings.Contains(text.String(), `agentplane_runs_finished_total{agent="w",cause="agent",code="",status="INPUT_REQUIRED"} 3`) {
			t.Errorf("metrics lack three INPUT_REQUIRED runs:\n%s", text.String())
		}
	})
}

func (h *treeHarness) startIn(sessionID, agentID, content string, fresh bool) *store.Run {
	h.t.Helper()
	s, err := h.m.StartRun(context.Background(), StartParams{UserID: "alice", SessionID: sessionID, AgentID: agentID, NewIntention: fresh,
		Message: agent.Message{Role: "user", Content: content}})
	if err != nil {
		h.t.Fatal(err)
	}
	return s.Run
}

// TestChildInputRequired: a child that asks back is handed to its caller
// as INPUT_REQUIRED with its question (the session's clients get
// sub_agent_complete with status input_required, not the question itself);
// the caller's next call of that agent in the same intention resumes the
// child, and a later root run answering the root's own question carries
// the intention on to its children.
func TestChildInputRequired(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{})
		results := make(chan *ChildResult, 4)
		h.agent("planner", []string{"w"}, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			c, err := h.call(ctx, "planner", in, "w", in.InputMessage.Content, "")
			if err != nil {
				return err
			}
			res, err := h.relay(ctx, c)
			if err != nil {
				return err
			}
			results <- res
			if res.Status == store.RunInputRequired {
				return out.send("input_required", map[string]string{"question": res.Question})
			}
			out.delta(res.Output)
			return out.done(nil)
		})
		h.agent("w", nil, "", weather)

		root := waitEnded(t, h.st, h.start("planner", "weather").RunID)
		res := <-results
		if root.Status != store.RunInputRequired || root.Question != "Which city?" {
			t.Fatalf("root %+v", root)
		}
		if res.Status != store.RunInputRequired || res.Question != "Which city?" || !sameJSON(res.Detail, `{"choices":["Paris","Oslo"]}`) || res.Output != "" {
			t.Errorf("child result %+v", res)
		}
		child := waitEnded(t, h.st, res.RunID)
		if child.IntentionID != root.IntentionID || child.Status != store.RunInputRequired {
			t.Errorf("child %+v", child)
		}
		evs := h.sessionEvents(root.SessionID)
		for _, e := range evs {
			if e.RunID == child.RunID && e.Type == eventlog.TypeSubAgentComplete {
				if !sameJSON(e.Payload, `{"agent_id":"w","status":"input_required","question":"Which city?","detail":{"choices":["Paris","Oslo"]},"output":"","usage":{},"duration_ms":`+jsonNumber(e.Payload, "duration_ms")+`}`) {
					t.Errorf("sub_agent_complete %s", e.Payload)
				}
			}
		}
		if seqOf(evs, child.RunID, eventlog.TypeInputRequired) == 0 || seqOf(evs, child.RunID, eventlog.TypeSubAgentComplete) == 0 {
			t.Error("the child's input_required or sub_agent_complete is missing")
		}

		// The user answers the root; the root calls w again in the same
		// intention, which resumes w's question.
		s, err := h.m.StartRun(context.Background(), StartParams{UserID: "alice", SessionID: root.SessionID, AgentID: "planner", Message: agent.Message{Role: "user", Content: "Paris"}})
		if err != nil {
			t.Fatal(err)
		}
		root2 := waitEnded(t, h.st, s.Run.RunID)
		res2 := <-results
		child2 := waitEnded(t, h.st, res2.RunID)
		if root2.Status != store.RunDone || root2.ResumesRunID != root.RunID || child2.ResumesRunID != child.RunID || child2.IntentionID != root.IntentionID || res2.Output != "Sunny in Paris" {
			t.Errorf("root2 %+v\nchild2 %+v\nres2 %+v", root2, child2, res2)
		}
		h.mu.Lock()
		wb := h.bodies["w"]
		h.mu.Unlock()
		if len(wb) != 2 || wb[1].ResumesRunID != child.RunID || wb[1].IntentionID != root.IntentionID {
			t.Errorf("w's bodies %+v", wb)
		}
		// The tree shows the question and the chain.
		node, err := h.m.Tree(context.Background(), root)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(node)
		for _, want := range []string{`"question":"Which city?"`, `"intention_id":"` + root.IntentionID + `"`, `"status":"INPUT_REQUIRED"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("tree %s lacks %s", b, want)
			}
		}
	})
}

func jsonNumber(payload json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	json.Unmarshal(payload, &m)
	return string(m[key])
}

var _ = time.Second

// TestQueuedAnswerResumes: an answer queued under the global cap (issue
// 14's queue) still resumes the question when it is admitted: its
// run_started carries the intention and resumes_run_id, and its agent gets
// them.
func TestQueuedAnswerResumes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		h := newTreeHarness(t, dialect, Options{MaxActiveRuns: 1})
		release := make(chan struct{})
		h.agent("w", nil, "", weather)
		h.agent("hold", nil, "", func(ctx context.Context, in invokeBody, out *sseOut) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return out.done(nil)
		})
		asked := waitEnded(t, h.st, h.start("w", "weather").RunID)
		holder := h.start("hold", "hold the only slot")
		s, err := h.m.StartRun(context.Background(), StartParams{UserID: "alice", SessionID: asked.SessionID, AgentID: "w", Message: agent.Message{Role: "user", Content: "Paris"}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Run.Status != store.RunQueued || s.Run.ResumesRunID != asked.RunID {
			t.Fatalf("the answer %+v: want queued, resuming %s", s.Run, asked.RunID)
		}
		close(release)
		waitEnded(t, h.st, holder.RunID)
		answer := waitEnded(t, h.st, s.Run.RunID)
		if answer.Status != store.RunDone {
			t.Fatalf("answer %+v", answer)
		}
		started := seqOf(h.sessionEvents(asked.SessionID), answer.RunID, eventlog.TypeRunStarted)
		for _, e := range h.sessionEvents(asked.SessionID) {
			if e.Seq == started && (!bytes.Contains(e.Payload, []byte(`"resumes_run_id":"`+asked.RunID+`"`)) || !bytes.Contains(e.Payload, []byte(`"intention_id":"`+asked.IntentionID+`"`))) {
				t.Errorf("run_started at admission %s", e.Payload)
			}
		}
		h.mu.Lock()
		b := h.bodies["w"]
		h.mu.Unlock()
		if len(b) != 2 || b[1].ResumesRunID != asked.RunID || b[1].IntentionID != asked.IntentionID {
			t.Errorf("bodies %+v", b)
		}
	})
}
