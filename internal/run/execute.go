package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/money"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tracing"
)

// execute invokes the agent and turns its stream into events. Deltas are
// queued without waiting for their commit (the writer keeps their order and
// the terminal transition commits after them), so a fast agent is not slowed
// to the database's commit rate. A child run is driven the same way; its
// deltas are also echoed to the session's clients as sub_agent_partial.
func (m *Manager) execute(ctx context.Context, j *job) {
	run, ag := j.run, j.ag
	log := m.opts.Logger.With("run_id", run.RunID, "session_id", run.SessionID, "agent_id", ag.AgentID)
	if tl := tracing.LogAttrs(ctx); tl != nil {
		log = log.With(tl...)
	}
	// The run's span (launch put it in ctx) gets the run's outcome.
	span := trace.SpanFromContext(ctx)
	outcome := func(o string) { span.SetAttributes(tracing.Outcome.String(o)) }
	failed := func(code string) { outcome("failed"); tracing.Fail(span, code) }
	if run.ParentRunID != "" {
		log = log.With("parent_run_id", run.ParentRunID, "depth", run.Depth)
	}
	began := time.Now()
	m.mu.Lock()
	a := m.active[run.RunID]
	m.mu.Unlock()
	if j.beforeInvoke != nil {
		j.beforeInvoke(ctx)
	}

	// A root agent gets the session's root-level turns; a child only its
	// input (it may read the transcript with its key), after its question
	// when it resumes one. A remote A2A agent
	// is sent only the new message — its context lives on its side, by
	// contextId — so its runs skip reading the transcript.
	transcript := []agent.Message{j.message}
	if run.ParentRunID != "" && run.ResumesRunID != "" && ag.Protocol != store.ProtocolA2A {
		// A child that resumes its own question gets it before the answer,
		// as a root does from the transcript (API.md: "the same way").
		if asked, err := m.st.RunGet(ctx, run.ResumesRunID); err == nil && asked.Question != "" {
			transcript = []agent.Message{{Role: "assistant", Content: asked.Question}, j.message}
		}
	}
	if run.ParentRunID == "" && ag.Protocol != store.ProtocolA2A {
		var err error
		if transcript, err = m.loadTranscript(ctx, run.SessionID); err != nil {
			log.Error("load transcript", "err", err)
			failed("platform_error")
			m.finishFailed(run, "platform_error", "could not load the session transcript", began, 0)
			return
		}
	}

	// text is the answer for the transcript; the output bound keeps it
	// (the only per-run copy of what the agent sent) at MaxOutputBytes.
	var text strings.Builder
	deltas := 0
	var outBytes int64
	outEvents := 0
	// Appends are queued without waiting; pending counts those whose
	// outcome is not known yet. A failure is noticed at the next event, and
	// before the run's end is committed every outcome is awaited: a run whose
	// output the log refused must not end DONE (issue 8).
	var appendMu sync.Mutex
	var appendErr error
	var pending sync.WaitGroup
	noteAppend := func(err error) {
		if err != nil {
			appendMu.Lock()
			if appendErr == nil {
				appendErr = err
			}
			appendMu.Unlock()
		}
	}
	onAppended := func(_ []store.Event, err error) {
		noteAppend(err)
		pending.Done()
	}
	appendFailed := func() error {
		appendMu.Lock()
		defer appendMu.Unlock()
		return appendErr
	}
	event := func(typ string, payload []byte) store.EventParams {
		return store.EventParams{
			SessionID: run.SessionID, RunID: run.RunID, ParentRunID: run.ParentRunID, TS: m.now(), Type: typ, Payload: payload,
			IfRunActive: true,
		}
	}
	// The run's output and its end form a chain: the end is submitted
	// right behind the output and may share its commit, and it cannot
	// commit if any of the output failed (eventlog.Chain).
	chain := &eventlog.Chain{}
	// queue appends events unless the run has ended (a.mu held by caller).
	// A behind append may linger up to that long to share the commit of
	// what follows it (queueAs).
	queueAs := func(behind time.Duration, evs ...store.EventParams) error {
		if a.ended {
			return context.Canceled
		}
		pending.Add(1)
		var err error
		if behind > 0 {
			err = m.log.AppendBehindIn(context.Background(), chain, behind, onAppended, evs...)
		} else {
			err = m.log.AppendAsyncIn(context.Background(), chain, onAppended, evs...)
		}
		if err != nil {
			pending.Done()
			noteAppend(err)
		}
		return err
	}
	queue := func(evs ...store.EventParams) error { return queueAs(0, evs...) }
	// A remote A2A agent's events come as the remote task's updates — its
	// ids, its artifacts, its final state — a few hundred µs apart, the
	// last of which ends the run: each may wait a moment (remoteLinger) for
	// the next, so a short task's output and its end share one commit
	// (issue 10).
	// An agent's own stream may wait a little too (streamLinger): with
	// many streams the deltas of several share a commit.
	linger := m.opts.StreamLinger
	if ag.Protocol == store.ProtocolA2A {
		linger = remoteLinger
	}
	partial := func(text string) store.EventParams {
		return event(eventlog.TypeSubAgentPartial, textPayload(text))
	}
	// remote is the remote task the agent reported last (handle's events
	// come one at a time).
	var remote *remoteRef
	echo := store.EchoOff
	if run.ParentRunID != "" {
		echo = ag.SubAgentEcho
	}
	var agg *aggregator
	if echo == store.EchoAggregate {
		agg = newAggregator(func(text string) {
			a.mu.Lock()
			defer a.mu.Unlock()
			_ = queue(partial(text)) // a refusal is noticed at the next event
		})
		defer agg.close(false)
	}
	handle := func(ev agent.StreamEvent) error {
		if err := appendFailed(); err != nil {
			return err
		}
		var typ string
		var payload []byte
		switch ev.Type {
		case "delta":
			if err := m.checkOutput(&outBytes, &outEvents, len(ev.Text)); err != nil {
				return err
			}
			text.WriteString(ev.Text)
			deltas++
			typ = eventlog.TypeAgentStreamDelta
			payload = textPayload(ev.Text)
		case "remote_task":
			// An A2A agent's task: recorded (trace only) so a run that
			// resumes this one continues the same remote task.
			typ = eventlog.TypeA2ARemoteTask
			payload, _ = json.Marshal(map[string]string{"agent_id": ag.AgentID, "task_id": ev.RemoteTaskID, "context_id": ev.RemoteContextID})
			remote = &remoteRef{taskID: ev.RemoteTaskID, contextID: ev.RemoteContextID}
		case "state":
			typ = eventlog.TypeState
			detail := ev.Detail
			if len(detail) == 0 {
				detail = json.RawMessage("{}")
			}
			// source tells clients this is the agent's own state, whatever
			// its name: only source "platform" states are the run's (issue 8).
			payload, _ = json.Marshal(struct {
				State  string          `json:"state"`
				Detail json.RawMessage `json:"detail"`
				Source string          `json:"source"`
			}{ev.State, detail, eventlog.StateSourceAgent})
			if err := m.checkOutput(&outBytes, &outEvents, len(payload)); err != nil {
				return err
			}
		default:
			return nil
		}
		evs := []store.EventParams{event(typ, payload)}
		if typ == eventlog.TypeAgentStreamDelta && echo == store.EchoPassthrough {
			evs = append(evs, partial(ev.Text))
		}
		// The run lock orders this append against Cancel: once a cancel
		// has been queued, no delta can be queued after it.
		a.mu.Lock()
		err := queueAs(linger, evs...)
		a.mu.Unlock()
		if err == nil && agg != nil && typ == eventlog.TypeAgentStreamDelta {
			agg.add(ev.Text) // after a.mu: the aggregator takes it to emit
		}
		return err
	}

	req := agent.InvokeRequest{
		AgentID: ag.AgentID, SessionID: run.SessionID, RunID: run.RunID, ParentRunID: run.ParentRunID, Depth: run.Depth,
		UserID: run.UserID, Traceparent: j.traceparent, InputMessage: j.message, Messages: transcript,
		IntentionID: run.IntentionID, ResumesRunID: run.ResumesRunID, Protocol: ag.Protocol, Card: ag.A2ACard,
		Paused: func() bool { return m.waiting(run.RunID) },
	}
	prev := j.prevRunID
	if prev == "" && ag.Protocol == store.ProtocolA2A {
		prev = run.ResumesRunID // a queued run admitted later knows only that one
	}
	if prev != "" {
		// A remote A2A agent: a resumed run continues the previous run's
		// remote task; any other run joins its remote context.
		task, remoteCtx := m.remoteTask(ctx, run.SessionID, prev)
		req.RemoteContextID = remoteCtx
		if prev == run.ResumesRunID {
			req.RemoteTaskID = task
		}
	}
	// The agent invoke's span is the parent the agent is sent.
	ictx, ispan := tracing.Start(ctx, "agentplane.agent.invoke", trace.SpanKindClient, tracing.RunID.String(run.RunID),
		tracing.SessionID.String(run.SessionID), tracing.AgentID.String(ag.AgentID), tracing.Protocol.String(protocolOf(ag)))
	req.Traceparent = tracing.Traceparent(ictx)
	m.mu.Lock()
	if a := m.active[run.RunID]; a != nil {
		a.traceparent = req.Traceparent
	}
	m.mu.Unlock()
	res, err := m.opts.Invoker.Invoke(ictx, ag.Endpoint, req, handle)
	cause := context.Cause(ctx)
	if cause == nil {
		tracing.End(ispan, err)
	} else {
		// The platform closed the request (a cancel, an end elsewhere, a
		// shutdown): not the agent's failure; the run's span says why.
		ispan.End()
	}

	switch {
	case errors.Is(cause, errCancelledByUser):
		// Cancel already committed the terminal state.
		log.Info("run cancelled", "deltas", deltas)
		outcome("cancelled")
		return
	case errors.Is(cause, errEndedElsewhere):
		// Another step already committed the terminal state — a tool
		// call's failure, its parent's end, a cancel on another replica,
		// an approval's rejection — so the span says what was recorded.
		status, code := m.recordedEnd(context.WithoutCancel(ctx), run.RunID)
		log.Info("run ended elsewhere", "status", status, "code", code, "deltas", deltas)
		switch status {
		case store.RunCancelled:
			outcome("cancelled")
		case store.RunFailed:
			failed(code)
		default:
			outcome(strings.ToLower(status))
		}
		return
	case errors.Is(cause, errShutdown):
		failed("platform_shutdown")
		m.finishFailed(run, "platform_shutdown", "the platform shut down before the run finished", began, deltas)
		return
	}
	if agg != nil {
		agg.close(true) // the last partial, before the child's end
	}
	refused := func(failed error) {
		log.Error("the event log refused the run's output", "err", failed, "deltas", deltas)
		outcome("failed")
		tracing.Fail(span, "platform_error")
		m.finishFailed(run, "platform_error", "the event log could not record the agent's output; the run was stopped", began, deltas)
	}
	if err != nil {
		// Every queued append commits (or fails) first, so a refused
		// output is what the run fails with.
		pending.Wait()
	}
	if failed := appendFailed(); failed != nil {
		refused(failed)
		return
	}
	if err != nil {
		code, msg := "agent_error", err.Error()
		var ie *agent.InvokeError
		var oe *outputError
		switch {
		case errors.As(err, &ie):
			code, msg = ie.Code, ie.Message
		case errors.As(err, &oe):
			code, msg = oe.code(), oe.Error()
		}
		log.Warn("run failed", "code", code, "err", err)
		failed(code)
		m.finishFailed(run, code, msg, began, deltas)
		return
	}
	invoke := map[string]any{"duration_ms": time.Since(began).Milliseconds(), "deltas": deltas}
	end, endOutcome, failMsg := End{Status: store.RunDone, Usage: json.RawMessage("{}"), Output: text.String(), Reason: "the run finished", Invoke: invoke},
		"done", "could not record the run's result"
	if res != nil && len(res.Usage) > 0 {
		end.Usage = res.Usage
	}
	if res != nil && res.InputRequired != nil {
		q := res.InputRequired
		end, endOutcome, failMsg = End{Status: store.RunInputRequired, Question: q.Question, Detail: q.Detail, Reason: "the agent asked the user for input", Invoke: invoke},
			"input_required", "could not record the agent's question"
	}
	end.remote = remote
	// A remote A2A agent holds no run token: it makes no LLM call, tool
	// call or child run through the platform, as a rule (DESIGN §12).
	end.quiet = ag.Protocol == store.ProtocolA2A
	if end.Status == store.RunDone {
		log.Debug("run done", "deltas", deltas, "ms", time.Since(began).Milliseconds())
	}
	// The end joins the output's chain without waiting for its commit: it
	// commits after all of it, or not at all if any of it failed.
	if !m.finishInChain(run, end, chain, began, deltas, failMsg) {
		pending.Wait()
		refused(chain.Err())
		return
	}
	outcome(endOutcome)
}

// remoteLinger is how long a remote A2A agent's output may wait to share
// its commit with the update that follows it: the delay it adds to that
// output's delivery, at most.
const remoteLinger = 2 * time.Millisecond

// streamLinger is how long an agent's streamed output (deltas, states) may
// wait for other output to share its commit — a run's end, or anything
// else a caller waits for, ends the wait at once. Each commit has a fixed
// cost (a transaction, the seq update, an fsync or a WAL flush): at 200
// streams × 20 deltas/s a commit carried two or three deltas, and that
// cost was most of the server's CPU per delivered event (issue 13). It is
// also the most a delta's delivery is delayed by it; DESIGN §2 (invariant 1) allows
// deltas to be batched up to 20 ms.
const streamLinger = 2 * time.Millisecond

// protocolOf names how an agent is invoked, for its invoke span.
func protocolOf(ag *store.Agent) string {
	if ag.Protocol == "" {
		return "agentplane"
	}
	return ag.Protocol
}

// outputError says a run's output passed one of its bounds. Returned from
// the stream handler, it closes the agent's request at once.
type outputError struct{ what string }

func (e *outputError) Error() string { return e.what }
func (e *outputError) code() string  { return "output_too_large" }

// checkOutput counts one more event of size bytes against the run's output
// bounds (issue 8: an agent streaming 400 MB took the server to 2.4 GB).
// The event that would pass a bound is refused, so what is recorded stays
// within it.
func (m *Manager) checkOutput(bytes *int64, events *int, size int) error {
	if *events+1 > m.opts.MaxOutputEvents {
		return &outputError{fmt.Sprintf("the agent sent more than %d delta and state events, the run's limit (AGENTPLANE_MAX_RUN_EVENTS)", m.opts.MaxOutputEvents)}
	}
	if *bytes+int64(size) > m.opts.MaxOutputBytes {
		return &outputError{fmt.Sprintf("the agent's output passed %d bytes, the run's limit (AGENTPLANE_MAX_RUN_OUTPUT_BYTES)", m.opts.MaxOutputBytes)}
	}
	*events++
	*bytes += int64(size)
	return nil
}

// finishInChain ends the run as end says (DONE with the agent's answer, or
// INPUT_REQUIRED with its question: DESIGN §12), in one transaction with
// the guarded transition and the cascade of a run's end, committed in
// chain after the run's output. It reports false, having recorded
// nothing, when the chain failed: the output was refused, and the caller
// fails the run. Any other failure to record the end fails the run with
// failMsg.
func (m *Manager) finishInChain(run *store.Run, end End, chain *eventlog.Chain, began time.Time, deltas int, failMsg string) bool {
	if m.opts.Quiesce != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.opts.Quiesce(ctx, run.RunID)
		cancel()
	}
	now := m.now()
	var ended []*store.Run
	_, err := m.log.DoIn(context.Background(), chain, run.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		var evs []store.EventParams
		var err error
		evs, ended, err = m.EndTx(ctx, tx, run, now, end)
		return evs, err
	})
	if err != nil && chain.Err() != nil {
		return false
	}
	if err != nil {
		m.opts.Logger.Error("record run end", "run_id", run.RunID, "session_id", run.SessionID, "status", end.Status, "err", err)
		m.finishFailed(run, "platform_error", failMsg, began, deltas)
		return true
	}
	m.countEnded(ended)
	if end.remote != nil && len(ended) > 0 && ended[len(ended)-1].RunID == run.RunID {
		// Ended here, with its output committed before the end: the
		// remote task it recorded is the log's.
		m.remote.put(run.RunID, *end.remote)
	}
	return true
}

// finishFailed moves an active run to FAILED with code. A run that already
// ended is left as it is.
func (m *Manager) finishFailed(run *store.Run, code, message string, began time.Time, deltas int) {
	if err := m.fail(context.Background(), run, code, message, map[string]any{"duration_ms": time.Since(began).Milliseconds(), "deltas": deltas}); err != nil {
		m.opts.Logger.Error("record run failure", "run_id", run.RunID, "session_id", run.SessionID, "code", code, "err", err)
	}
}

// fail is the one place the run manager fails a run: EndTx with the error
// stored on the run, agent_invoke_done (when invokeInfo is set) and
// run_failed, all in one transaction.
func (m *Manager) fail(ctx context.Context, run *store.Run, code, message string, invokeInfo map[string]any) error {
	_, err := m.failEnded(ctx, run, code, message, invokeInfo)
	return err
}

// failEnded is fail, also returning the runs it ended (none when the run
// had ended meanwhile, elsewhere).
func (m *Manager) failEnded(ctx context.Context, run *store.Run, code, message string, invokeInfo map[string]any) ([]*store.Run, error) {
	errJSON, _ := json.Marshal(map[string]string{"code": code, "message": message})
	now := m.now()
	var ended []*store.Run
	_, err := m.log.Do(ctx, run.SessionID, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
		var evs []store.EventParams
		var err error
		evs, ended, err = m.EndTx(ctx, tx, run, now, End{Status: store.RunFailed, Error: errJSON, Reason: "the run failed (" + code + ")", Invoke: invokeInfo})
		return evs, err
	})
	if err != nil {
		return nil, err
	}
	m.countEnded(ended)
	return ended, nil
}

// waiting reports whether a run's agent is expected to be silent: the run
// waits for an approval or a client tool, for a tool call it made (a slow
// server or MCP tool, bounded by its own deadline), or for a child run it
// started — the agent is long-polling the platform. It reads the store: the
// wait may be settled by another replica.
func (m *Manager) waiting(runID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := m.st.RunGet(ctx, runID)
	if err != nil {
		return false
	}
	if r.Status == store.RunPausedWaitingApproval || r.Status == store.RunPausedWaitingTool {
		return true
	}
	if calls, err := m.st.ToolCallListActiveByRun(ctx, runID); err == nil && len(calls) > 0 {
		return true
	}
	kids, err := m.st.RunListChildren(ctx, runID)
	if err != nil {
		return false
	}
	for _, k := range kids {
		if !store.RunIsTerminal(k.Status) {
			return true
		}
	}
	return false
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

// recordedEnd is the terminal status and error code the store holds for a
// run another step ended ("FAILED", "tool_call_failed" if unreadable).
func (m *Manager) recordedEnd(ctx context.Context, runID string) (status, code string) {
	r, err := m.st.RunGet(ctx, runID)
	if err != nil || !store.RunIsTerminal(r.Status) {
		return store.RunFailed, "tool_call_failed"
	}
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Error, &e)
	return r.Status, e.Code
}
