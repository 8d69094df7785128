package toolsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tracing"
)

// maxResultBytes bounds a server tool's answer.
const maxResultBytes = 1 << 20

// startExec runs a DISPATCHED server call in the background, detached from
// the request that dispatched it (an agent hanging up must not abort a
// tool that is running).
func (s *Service) startExec(c *store.ToolCall) { s.startExecFrom(trace.SpanContext{}, c) }

// startExecFrom is startExec with the span of the tool call that
// dispatched c (DESIGN §14), the parent of the execution's span.
func (s *Service) startExecFrom(parent trace.SpanContext, c *store.ToolCall) {
	s.execWG.Add(1)
	s.workers.run(func() {
		defer s.execWG.Done()
		ctx := s.execCtx
		if parent.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, parent)
		}
		s.execute(ctx, c)
	})
}

// execute claims c (DISPATCHED → RUNNING, a guarded transition: whoever
// else tries — a retry, a second replica — finds it claimed and stops), then
// POSTs to the endpoint and records the outcome. The claim is the only way
// to RUNNING, so a call is sent to its tool at most once.
func (s *Service) execute(ctx context.Context, c *store.ToolCall) {
	log := s.opts.Logger.With("tool_call_id", c.ToolCallID, "tool_name", c.ToolName, "run_id", c.RunID, "session_id", c.SessionID)
	if tl := tracing.LogAttrs(ctx); tl != nil {
		log = log.With(tl...)
	}
	rec := recordOf(c)
	args := s.argsFor(c, rec)
	if args == nil {
		// A redacted call whose real args this process does not hold.
		if s.holderAlive(ctx, rec) {
			// The holder sends it (it hears of the dispatch); should it die
			// first, the call must not wait for its deadline.
			s.watchHolder(ctx, c, rec, log)
			return
		}
		s.failUnsent(ctx, c, log)
		return
	}
	defer s.held.drop(c.ToolCallID)
	var claimed *store.ToolCall
	_, err := s.commit(ctx, c.SessionID, c.RunID, func(st *step) error {
		claimed = nil
		cur, err := st.claim(c, rec)
		if errors.Is(err, store.ErrConflict) {
			return nil // cancelled, timed out or claimed elsewhere
		}
		if err != nil {
			return err
		}
		claimed = cur
		return nil
	})
	if err != nil {
		log.Error("claim tool call", "err", err)
		return
	}
	if claimed == nil {
		return
	}
	s.send(ctx, claimedCall{c: claimed, rec: rec, args: args}, log)
}

// claimedCall is a server call claimed (RUNNING) by this process, with
// what it is sent.
type claimedCall struct {
	c    *store.ToolCall
	rec  policyRecord
	args json.RawMessage // the real ones of a redacted call
}

// claim moves c from DISPATCHED to RUNNING and records tool_dispatched: a
// guarded transition, so whoever else tries (a retry, a second replica)
// finds it claimed. The claim is the only way to RUNNING and is committed
// before the call is sent, so a call is sent at most once, and a crash
// after the claim leaves it RUNNING, which the restart ends FAILED
// outcome_unknown — never sent again.
//
// The dispatch that has the call's arguments claims it in its own
// transaction (dispatchClaimed; issue 13: one commit fewer per call);
// execute claims a call dispatched elsewhere in one of its own.
func (st *step) claim(c *store.ToolCall, rec policyRecord) (*store.ToolCall, error) {
	cur, err := st.move(c, store.ToolCallTransitionParams{From: []string{store.ToolCallDispatched}, Status: store.ToolCallRunning, IncAttempts: true})
	if err != nil {
		return cur, err
	}
	st.dispatched(cur, rec)
	return cur, nil
}

// dispatched records tool_dispatched for c, just claimed.
func (st *step) dispatched(c *store.ToolCall, rec policyRecord) {
	st.event(eventlog.TypeToolDispatched, map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "kind": c.Kind, "attempt": c.Attempts, "endpoint": rec.Endpoint, "deadline_at": c.DeadlineAt})
}

// dispatchClaimed dispatches c and claims it in one statement (through
// DISPATCHED to RUNNING, as claim), recording what dispatch and claim
// record, in the same order: the run's state, then tool_dispatched.
func (st *step) dispatchClaimed(c *store.ToolCall, rec policyRecord, deadline int64) (*store.ToolCall, error) {
	cur, err := st.move(c, store.ToolCallTransitionParams{From: []string{c.Status}, Via: store.ToolCallDispatched, Status: store.ToolCallRunning, DeadlineAt: &deadline, IncAttempts: true})
	if err != nil {
		return cur, err
	}
	return st.claimed(cur, rec)
}

// claimed records what dispatch and claim record for cur, a call this
// step moved (or inserted) to RUNNING, and sends it after the commit.
func (st *step) claimed(cur *store.ToolCall, rec policyRecord) (*store.ToolCall, error) {
	// The run's state follows the dispatch (detail: DISPATCHED, as a
	// dispatch without the claim would say).
	shown := *cur
	shown.Status = store.ToolCallDispatched
	if err := st.syncRun(&shown, nil); err != nil {
		return cur, err
	}
	st.dispatched(cur, rec)
	st.toPost = append(st.toPost, claimedCall{c: cur, rec: rec, args: st.s.argsFor(cur, rec)})
	return cur, nil
}

// startClaimed sends a call claimed by a committed step, in the background
// like startExec.
// parent is the span of the tool call that dispatched it (DESIGN §14), the
// parent of the execution's span, as in startExecFrom.
func (s *Service) startClaimed(parent trace.SpanContext, cc claimedCall) {
	s.execWG.Add(1)
	s.workers.run(func() {
		defer s.execWG.Done()
		defer s.held.drop(cc.c.ToolCallID)
		ctx := s.execCtx
		if parent.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, parent)
		}
		log := s.opts.Logger.With("tool_call_id", cc.c.ToolCallID, "tool_name", cc.c.ToolName, "run_id", cc.c.RunID, "session_id", cc.c.SessionID)
		if tl := tracing.LogAttrs(ctx); tl != nil {
			log = log.With(tl...)
		}
		s.send(ctx, cc, log)
	})
}

// send POSTs a claimed call (or calls its MCP server) and records the
// outcome.
func (s *Service) send(ctx context.Context, cc claimedCall, log *slog.Logger) {
	claimed := cc.c
	deadline := time.UnixMilli(claimed.DeadlineAt)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// The execution's span; a server tool is sent its traceparent.
	rctx, span := tracing.Start(rctx, "agentplane.tool.execute "+claimed.ToolName, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(tracing.ToolCallID.String(claimed.ToolCallID), tracing.ToolName.String(claimed.ToolName), tracing.ToolKind.String(claimed.Kind),
			tracing.RunID.String(claimed.RunID), tracing.SessionID.String(claimed.SessionID), attribute.Int("agentplane.attempt", claimed.Attempts))
	}
	var status string
	var result, errJSON json.RawMessage
	switch claimed.Kind {
	case store.ToolKindMCP:
		status, result, errJSON = s.callMCP(rctx, claimed, cc.args)
	default:
		status, result, errJSON = s.post(rctx, claimed, cc.rec.Endpoint, cc.args)
	}
	span.SetAttributes(tracing.Outcome.String(status))
	if status != store.ToolCallSucceeded {
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(errJSON, &e) != nil || e.Code == "" {
			e.Code = strings.ToLower(status)
		}
		tracing.Fail(span, e.Code) // the code, as every failed span's status
	}
	span.End()
	if ctx.Err() != nil {
		// Shutting down: the deadline (or the run's end) settles the call.
		return
	}
	_, err := s.commit(context.Background(), claimed.SessionID, claimed.RunID, func(st *step) error {
		_, err := st.finish(claimed, []string{store.ToolCallRunning}, status, result, errJSON, 0)
		if errors.Is(err, store.ErrConflict) {
			return nil // timed out or cancelled meanwhile: the late answer is dropped
		}
		return err
	})
	if err != nil {
		log.Error("record tool result", "err", err)
	}
}

// watchHolder waits while the process holding c's real arguments lives and
// c stays dispatched (the holder claims it); when the holder dies first, c
// is failed as unsendable.
func (s *Service) watchHolder(ctx context.Context, c *store.ToolCall, rec policyRecord, log *slog.Logger) {
	t := time.NewTicker(heldCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := s.st.ToolCallGet(ctx, c.ToolCallID)
		if err != nil || cur.Status != store.ToolCallDispatched {
			return
		}
		if !s.holderAlive(ctx, rec) {
			s.failUnsent(ctx, cur, log)
			return
		}
	}
}

// failUnsent ends a dispatched redacted call nobody can send: the process
// that held its real arguments is gone (redact.go). It was never sent.
func (s *Service) failUnsent(ctx context.Context, c *store.ToolCall, log *slog.Logger) {
	msg := "the call's redacted arguments were kept only in the memory of the agentplane process that created it, which is gone; the call was not sent"
	_, err := s.commit(ctx, c.SessionID, c.RunID, func(st *step) error {
		_, err := st.finish(c, []string{store.ToolCallDispatched}, store.ToolCallFailed, nil, errorJSON("args_unavailable", msg, nil), 0)
		if errors.Is(err, store.ErrConflict) {
			return nil // claimed, cancelled or timed out meanwhile
		}
		return err
	})
	if err != nil {
		log.Error("fail a redacted call without its arguments", "err", err)
	}
}

// post sends the call, with args (the real ones of a redacted call), to
// its endpoint and classifies the answer.
func (s *Service) post(ctx context.Context, c *store.ToolCall, endpoint string, args json.RawMessage) (status string, result, errJSON json.RawMessage) {
	body, _ := json.Marshal(map[string]any{"tool_call_id": c.ToolCallID, "run_id": c.RunID, "tool_name": c.ToolName, "args": args})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return store.ToolCallFailed, nil, errorJSON("tool_unreachable", "bad endpoint: "+err.Error(), nil)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", c.ToolCallID)
	req.Header.Set("x-run-id", c.RunID)
	req.Header.Set("x-session-id", c.SessionID)
	tracing.Inject(ctx, req.Header)
	resp, err := s.opts.HTTP.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return store.ToolCallTimeout, nil, errorJSON("timeout", fmt.Sprintf("the tool did not answer within %d ms", c.TimeoutMS), nil)
		}
		var ee *agent.EndpointError
		if errors.As(err, &ee) {
			return store.ToolCallFailed, nil, errorJSON("tool_unreachable", ee.Message, nil)
		}
		return store.ToolCallFailed, nil, errorJSON("tool_unreachable", err.Error(), nil)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResultBytes+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return store.ToolCallTimeout, nil, errorJSON("timeout", fmt.Sprintf("the tool did not finish answering within %d ms", c.TimeoutMS), nil)
		}
		return store.ToolCallFailed, nil, errorJSON("tool_unreachable", "reading the answer: "+err.Error(), nil)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var detail json.RawMessage
		if json.Valid(raw) {
			detail = raw
		} else {
			detail, _ = json.Marshal(truncate(string(raw), 512))
		}
		return store.ToolCallFailed, nil, errorJSON("tool_http_error", fmt.Sprintf("the tool answered HTTP %d", resp.StatusCode), detail)
	}
	if len(raw) > maxResultBytes {
		return store.ToolCallFailed, nil, errorJSON("tool_protocol_error", fmt.Sprintf("the tool's answer is larger than %d bytes", maxResultBytes), nil)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		raw = []byte("null")
	}
	if !json.Valid(raw) {
		return store.ToolCallFailed, nil, errorJSON("tool_protocol_error", "the tool's answer is not JSON", nil)
	}
	return store.ToolCallSucceeded, raw, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
