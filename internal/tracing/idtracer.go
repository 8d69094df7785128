package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

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
	return idStart(ctx, parent)
}

// idStart starts an id-only span, a child of parent if it is valid.
func idStart(ctx context.Context, parent trace.SpanContext) (context.Context, trace.Span) {
	// math/rand/v2's generator (per-thread ChaCha8, no lock, no system
	// call) is what span ids need: unique, not secret.
	cfg := trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
	for !cfg.SpanID.IsValid() {
		binary.LittleEndian.PutUint64(cfg.SpanID[:], rand.Uint64())
	}
	if parent.IsValid() {
		cfg.TraceID, cfg.TraceFlags, cfg.TraceState = parent.TraceID(), parent.TraceFlags(), parent.TraceState()
	} else {
		for !cfg.TraceID.IsValid() {
			binary.LittleEndian.PutUint64(cfg.TraceID[:8], rand.Uint64())
			binary.LittleEndian.PutUint64(cfg.TraceID[8:], rand.Uint64())
		}
	}
	s := &idSpan{sc: trace.NewSpanContext(cfg)}
	return trace.ContextWithSpan(ctx, s), s
}

// idSpan is a non-recording span with its own span context.
type idSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s *idSpan) SpanContext() trace.SpanContext { return s.sc }
