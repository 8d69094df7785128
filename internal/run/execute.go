package run

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/money"
	"github.com/agentplane/agentplane/internal/store"
)

// execute invokes the agent and turns its stream into events. Deltas are
// queued without waiting for their commit (the writer keeps their order and
// the terminal transition commits after them), so a fast agent is not slowed
// to the database's commit rate.
func (m *Manager) execute(ctx context.Context, run *store.Run, ag *store.Agent, p StartParams, traceparent string) {
	log := m.opts.Logger.With("run_id", run.RunID, "session_id", run.SessionID, "agent_id", ag.AgentID)
	began := time.Now()
	m.mu.Lock()
	a := m.active[run.RunID]
	m.mu.Unlock()

	msgs, err := m.st.MessagesList(ctx, &store.MessagesListParams{SessionID: run.SessionID, Limit: m.opts.TranscriptLimit})
	if err != nil {
		log.Error("load transcript", "err", err)
		m.finishFailed(run, "platform_error", "could not load the session transcript", began, 0)
		return
	}
	transcript := make([]agent.Message, len(msgs))
	for i, msg := range msgs {
		transcript[i] = agent.Message{Role: msg.Role, Content: msg.Content}
	}

	var text strings.Builder
	deltas := 0
	var appendMu sync.Mutex
	var appendErr error
	onAppended := func(_ []store.Event, err error) {
		if err != nil {
			appendMu.Lock()
			appendErr = err
			appendMu.Unlock()
		}
	}
	handle := func(ev agent.StreamEvent) error {
		appendMu.Lock()
		failed := appendErr
		appendMu.Unlock()
		if failed != nil {
			return failed
		}
		var typ string
		var payload []byte
		switch ev.Type {
		case "delta":
			text.WriteString(ev.Text)
			deltas++
			typ = eventlog.TypeAgentStreamDelta
			payload, _ = json.Marshal(struct {
				Text string `json:"text"`
			}{ev.Text})
		case "state":
			typ = eventlog.TypeState
			detail := ev.Detail
			if len(detail) == 0 {
				detail = json.RawMessage("{}")
			}
			payload, _ = json.Marshal(struct {
				State  string          `json:"state"`
				Detail json.RawMessage `json:"detail"`
			}{ev.State, detail})
		default:
			return nil
		}
		// The run lock orders this append against Cancel: once a cancel
		// has been queued, no delta can be queued after it.
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.ended {
			return context.Canceled
		}
		return m.log.AppendAsync(context.Background(), onAppended, store.EventParams{
			SessionID: run.SessionID, RunID: run.RunID, TS: m.now(), Type: typ, Payload: payload,
			IfRunActive: true,
		})
	}

	res, err := m.opts.Invoker.Invoke(ctx, ag.Endpoint, agent.InvokeRequest{
		AgentID: ag.AgentID, SessionID: run.SessionID, RunID: run.RunID, UserID: run.UserID,
		Traceparent: traceparent, InputMessage: p.Message, Messages: transcript,
		Paused: func() bool {
			// Silence while the run waits for an approval or a client tool is
			// expected (the agent is long-polling the platform). Read the
			// store: the wait may be settled by another replica.
			r, err := m.st.RunGet(context.Background(), run.RunID)
			return err == nil && (r.Status == store.RunPausedWaitingApproval || r.Status == store.RunPausedWaitingTool)
		},
	}, handle)

	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCancelledByUser):
		// Cancel already committed the terminal state.
		log.Info("run cancelled", "deltas", deltas)
	case errors.Is(cause, errEndedElsewhere):
		// A tool call's failure already committed the terminal state.
		log.Info("run ended by a tool call", "deltas", deltas)
	case errors.Is(cause, errShutdown):
		m.finishFailed(run, "platform_shutdown", "the platform shut down before the run finished", began, deltas)
	case err != nil:
		code, msg := "agent_error", err.Error()
		var ie *agent.InvokeError
		if errors.As(err, &ie) {
			code, msg = ie.Code, ie.Message
		}
		appendMu.Lock()
		if appendErr != nil {
			code, msg = "platform_error", "the event log could not record the run"
		}
		appendMu.Unlock()
		log.Warn("run failed", "code", code, "err", err)
		m.finishFailed(run, code, msg, began, deltas)
	default:
		m.finishDone(run, res, text.String(), began, deltas)
	}
}

func (m *Manager) finishDone(run *store.Run, res *agent.Result, text string, began time.Time, deltas int) {
	usage := json.RawMessage("{}")
	if res != nil && len(res.Usage) > 0 {
		usage = res.Usage
	}
	if m.opts.Quiesce != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.opts.Quiesce(ctx, run.RunID)
		cancel()
	}
	now := m.now()
	ok := false
	_, err := m.log.Do(context.Background(), run.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		ok = false
		_, err := tx.RunTransition(ctx, &store.RunTransitionParams{RunID: run.RunID, From: store.RunActiveStatuses, Status: store.RunDone, At: now, Usage: usage})
		if errors.Is(err, store.ErrConflict) {
			return nil, nil // ended meanwhile (cancelled); nothing to record
		}
		if err != nil {
			return nil, err
		}
		ok = true
		cascade, err := m.onEnd(ctx, tx, run, now)
		if err != nil {
			return nil, err
		}
		if text != "" {
			if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: newMessageID(), SessionID: run.SessionID, RunID: run.RunID, Role: "assistant", Content: text, CreatedAt: now}); err != nil {
				return nil, err
			}
		}
		cost, calls, err := runCost(ctx, tx, run)
		if err != nil {
			return nil, err
		}
		invokeDone, _ := json.Marshal(map[string]any{"ok": true, "duration_ms": time.Since(began).Milliseconds(), "deltas": deltas})
		done, _ := json.Marshal(map[string]any{"usage": usage, "total_cost": cost, "llm_calls": calls})
		return append(cascade,
			store.EventParams{SessionID: run.SessionID, RunID: run.RunID, TS: now, Type: eventlog.TypeAgentInvokeDone, Payload: invokeDone},
			store.EventParams{SessionID: run.SessionID, RunID: run.RunID, TS: now, Type: eventlog.TypeRunDone, Payload: done},
		), nil
	})
	if err == nil && ok {
		m.ended(run, store.RunDone, "", now)
	}
	if err != nil {
		m.opts.Logger.Error("record run done", "run_id", run.RunID, "session_id", run.SessionID, "err", err)
		m.finishFailed(run, "platform_error", "could not record the run's result", began, deltas)
	}
}

// finishFailed moves an active run to FAILED with code. A run that already
// ended is left as it is.
func (m *Manager) finishFailed(run *store.Run, code, message string, began time.Time, deltas int) {
	if err := m.fail(context.Background(), run, code, message, map[string]any{"duration_ms": time.Since(began).Milliseconds(), "deltas": deltas}); err != nil {
		m.opts.Logger.Error("record run failure", "run_id", run.RunID, "session_id", run.SessionID, "code", code, "err", err)
	}
}

// fail is the one place a run becomes FAILED: guarded transition, the
// error stored on the run, agent_invoke_done (when invokeInfo is set) and
// run_failed, all in one transaction.
func (m *Manager) fail(ctx context.Context, run *store.Run, code, message string, invokeInfo map[string]any) error {
	errJSON, _ := json.Marshal(map[string]string{"code": code, "message": message})
	now := m.now()
	ok := false
	_, err := m.log.Do(ctx, run.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		ok = false
		_, err := tx.RunTransition(ctx, &store.RunTransitionParams{RunID: run.RunID, From: store.RunActiveStatuses, Status: store.RunFailed, At: now, Error: errJSON})
		if errors.Is(err, store.ErrConflict) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		ok = true
		evs, err := m.onEnd(ctx, tx, run, now)
		if err != nil {
			return nil, err
		}
		if invokeInfo != nil {
			invokeInfo["ok"] = false
			invokeInfo["error"] = json.RawMessage(errJSON)
			b, _ := json.Marshal(invokeInfo)
			evs = append(evs, store.EventParams{SessionID: run.SessionID, RunID: run.RunID, ParentRunID: run.ParentRunID, TS: now, Type: eventlog.TypeAgentInvokeDone, Payload: b})
		}
		return append(evs, store.EventParams{SessionID: run.SessionID, RunID: run.RunID, ParentRunID: run.ParentRunID, TS: now, Type: eventlog.TypeRunFailed, Payload: errJSON}), nil
	})
	if err == nil && ok {
		m.ended(run, store.RunFailed, code, now)
	}
	return err
}

// runCost sums estimated_cost over the run's llm_call_done events. It runs
// inside the run_done transaction: the proxy's write-behind events for this
// session were queued earlier on the same writer, so they are visible here.
func runCost(ctx context.Context, tx store.Queries, run *store.Run) (float64, int, error) {
	evs, err := tx.EventsList(ctx, &store.EventsListParams{SessionID: run.SessionID, RunID: run.RunID, Type: eventlog.TypeLLMCallDone, Limit: 10000})
	if err != nil {
		return 0, 0, err
	}
	var total float64
	for _, e := range evs {
		var p struct {
			EstimatedCost float64 `json:"estimated_cost"`
		}
		if json.Unmarshal(e.Payload, &p) == nil {
			total += p.EstimatedCost
		}
	}
	return money.Round(total), len(evs), nil
}
