package tracing

import (
	"context"
	"crypto/rand"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// idTracer is the tracer when nothing is exported: its spans record
// nothing but have real ids, a child keeping its parent's trace id and
// flags, so the traceparent agentplane sends stays a true parent link
// (as it was before tracing: run_started records it, agents continue it).
type idTracer struct{ embedded.Tracer }

func (idTracer) Start(ctx context.Context, _ string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	if cfg := trace.NewSpanStartConfig(opts...); cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	var b [24]byte
	for {
		rand.Read(b[:])
		if !zero(b[16:]) && (parent.IsValid() || !zero(b[:16])) {
			break
		}
	}
	cfg := trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
	copy(cfg.SpanID[:], b[16:])
	if parent.IsValid() {
		cfg.TraceID, cfg.TraceFlags, cfg.TraceState = parent.TraceID(), parent.TraceFlags(), parent.TraceState()
	} else {
		copy(cfg.TraceID[:], b[:16])
	}
	s := idSpan{sc: trace.NewSpanContext(cfg)}
	return trace.ContextWithSpan(ctx, s), s
}

func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// idSpan is a non-recording span with its own span context.
type idSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s idSpan) SpanContext() trace.SpanContext { return s.sc }
