// Package tracing is agentplane's OpenTelemetry setup (DESIGN §14): spans
// for runs, agent invokes, LLM calls and tool calls, parented by the W3C
// traceparent. Spans are exported over OTLP/HTTP only when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; otherwise the tracer only mints span ids, so a traceparent still
// flows to agents, tools and upstreams at the cost of a random number.
package tracing

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys agentplane puts on its spans.
const (
	RunID       = attribute.Key("agentplane.run_id")
	SessionID   = attribute.Key("agentplane.session_id")
	AgentID     = attribute.Key("agentplane.agent_id")
	ParentRunID = attribute.Key("agentplane.parent_run_id")
	ToolCallID  = attribute.Key("agentplane.tool_call_id")
	ToolName    = attribute.Key("agentplane.tool_name")
	ToolKind    = attribute.Key("agentplane.tool_kind")
	ToolState   = attribute.Key("agentplane.tool_state")
	Outcome     = attribute.Key("agentplane.outcome")
	Protocol    = attribute.Key("agentplane.protocol")
)

// provider is the process's tracer provider: the id-only one until Setup
// finds an endpoint.
var (
	tracer  atomic.Pointer[trace.Tracer]
	enabled atomic.Bool
)

func init() {
	var t trace.Tracer = idTracer{}
	tracer.Store(&t)
	otel.SetTextMapPropagator(propagation.TraceContext{})
}

// Enabled reports whether spans are exported.
func Enabled() bool { return enabled.Load() }

// Exporting reports whether getenv names an OTLP endpoint for traces.
func Exporting(getenv func(string) string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the process's tracer provider. With no OTLP endpoint in
// getenv it creates no exporter and returns a no-op shutdown. Otherwise
// spans are batched (OTEL_BSP_*) and sent over OTLP/HTTP (the standard
// client reads the other OTEL_EXPORTER_OTLP_* variables itself), sampled
// as OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG say, within the
// OTEL_SPAN_*_LIMIT limits; shutdown flushes them.
func Setup(ctx context.Context, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	if !Exporting(getenv) {
		return func(context.Context) error { return nil }, nil
	}
	client := otlptracehttp.NewClient()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "agentplane"
	}
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(name), semconv.ServiceVersion(version)))
	if err != nil {
		res = resource.Default()
	}
	p := &provider{sampler: samplerFromEnv(getenv), limits: sdktrace.NewSpanLimits(), resource: res, tracers: map[scopeKey]*otelTracer{}}
	p.bsp = newBatcher(newOTLPExporter(client, p), getenv)
	otel.SetTracerProvider(p)
	t := p.Tracer("github.com/agentplane/agentplane")
	tracer.Store(&t)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		var it trace.Tracer = idTracer{}
		tracer.Store(&it)
		p.shut.Store(true)
		return p.bsp.Shutdown(ctx)
	}, nil
}

// samplerFromEnv is the sampler OTEL_TRACES_SAMPLER names (the SDK's
// default, parentbased_always_on, when it names none it knows), with
// OTEL_TRACES_SAMPLER_ARG the ratio of the traceidratio ones (default 1).
func samplerFromEnv(getenv func(string) string) sdktrace.Sampler {
	ratio := func() float64 {
		r, err := strconv.ParseFloat(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")), 64)
		if err != nil || r < 0 || r > 1 {
			return 1
		}
		return r
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))) {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio())
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio()))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// Start starts a span named name as a child of ctx's span (a local span or
// a remote parent from a traceparent), or a new trace.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	switch t := (*tracer.Load()).(type) {
	case idTracer:
		// Nothing exported: no options to build, the span needs ids only.
		return idStart(ctx, trace.SpanContextFromContext(ctx))
	case *otelTracer:
		return t.start(ctx, name, kind, attrs, nil, false, time.Time{})
	default:
		return t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	}
}

// End ends span, marking it failed when err is not nil: with err's code
// where it has one (an API error, an agent's failure — API.md: "a failure
// sets the span's status to error with the error code"), else its text.
func End(span trace.Span, err error) {
	if err != nil {
		Fail(span, ErrorCode(err))
	}
	span.End()
}

// ErrorCode is the code of the first error in err's chain that has one
// (an ErrorCode method), else err's text.
func ErrorCode(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		if c := coded.ErrorCode(); c != "" {
			return c
		}
	}
	return err.Error()
}

// Fail marks span failed with a description (an error code, a message).
func Fail(span trace.Span, desc string) {
	if span.IsRecording() {
		span.SetStatus(codes.Error, desc)
	}
}

// otelHandle reports an export error the way the SDK's processor does.
func otelHandle(err error) { otel.Handle(err) }

// SetAttributes sets kv on span. Called with the span agentplane's
// tracer made, kv does not escape, so the caller's variadic slice stays
// on its stack (span.SetAttributes, an interface call, moves it to the
// heap every time).
func SetAttributes(s trace.Span, kv ...attribute.KeyValue) {
	if ls, ok := s.(*span); ok {
		ls.SetAttributes(kv...)
	} else if s.IsRecording() {
		s.SetAttributes(slices.Clone(kv)...)
	}
}
