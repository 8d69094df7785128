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
// if it sent one: the parent of the call's execution and of a child run.
func (s *Service) Invoke(ctx context.Context, p InvokeParams) (*CallView, error) {
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
