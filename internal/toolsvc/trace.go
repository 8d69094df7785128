package toolsvc

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/tracing"
)

// Invoke creates a tool call, decides its policy and starts it, all in one
// transaction with its events. A repeated idempotency key returns the call
// it created (409 if the args differ). An allowed server tool is waited
// for (up to InlineWait), so a fast tool answers succeeded at once.
//
// The request has a span (DESIGN §14), a child of the agent's traceparent
// if it sent one, else of the run's agent invoke (as an LLM call's is): the
// parent of the call's execution and of a child run.
func (s *Service) Invoke(ctx context.Context, p InvokeParams) (*CallView, error) {
	ctx = s.runTrace(ctx, p.RunID)
	ctx, span := tracing.Start(ctx, "agentplane.tool_call "+p.ToolName, trace.SpanKindServer)
	v, err := s.invoke(ctx, p)
	if span.IsRecording() {
		span.SetAttributes(tracing.ToolName.String(p.ToolName), tracing.RunID.String(p.RunID), tracing.AgentID.String(p.AgentID))
		if v != nil {
			span.SetAttributes(tracing.ToolCallID.String(v.ToolCallID), tracing.Outcome.String(v.Status), tracing.ToolState.String(v.State))
			if v.Error != nil {
				tracing.Fail(span, v.Error.Code)
			}
		}
	}
	tracing.End(span, err)
	return v, err
}

// runTrace returns ctx as it is when it carries a span, else with the
// run's agent invoke span (on this process) as its parent: a run is one
// trace whether or not its agent forwards traceparent, and whoever moves
// a call on later (a decider, the sweeper) has no span of the run's.
func (s *Service) runTrace(ctx context.Context, runID string) context.Context {
	if s.opts.Runs == nil || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return tracing.WithTraceparent(ctx, s.opts.Runs.InvokeTraceparent(runID))
}
