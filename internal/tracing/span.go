package tracing

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// provider is the tracer provider when spans are exported. It keeps the
// OpenTelemetry API (trace.Span, the SDK's samplers, span limits and
// resource) but records a span as one allocation, with no
// de-duplication map, snapshot or OTLP proto structs: an ended span goes
// to the batcher as it is, and the exporter encodes it straight to OTLP
// protobuf (encode.go). BENCHMARKS.md, observability, has why.
type provider struct {
	embedded.TracerProvider
	sampler  sdktrace.Sampler
	limits   sdktrace.SpanLimits
	resource *resource.Resource
	bsp      *batcher
	// shut: after shutdown spans record nothing, as the SDK's.
	shut atomic.Bool

	mu      sync.Mutex
	tracers map[scopeKey]*otelTracer
}

func (p *provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	c := trace.NewTracerConfig(opts...)
	attrs := c.InstrumentationAttributes()
	scope := scopeKey{name: name, version: c.InstrumentationVersion(), schemaURL: c.SchemaURL(), attrs: attrs.Equivalent()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.tracers[scope]; ok {
		return t
	}
	t := &otelTracer{p: p, scope: encodeScope(name, scope.version, attrs), schemaURL: scope.schemaURL}
	p.tracers[scope] = t
	return t
}

// scopeKey identifies an instrumentation scope.
type scopeKey struct {
	name, version, schemaURL string
	attrs                    attribute.Distinct
}

// otelTracer is a tracer of the provider; scope is its instrumentation
// scope, already encoded (an InstrumentationScope message).
type otelTracer struct {
	embedded.Tracer
	p         *provider
	scope     []byte
	schemaURL string
}

func (t *otelTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	c := trace.NewSpanStartConfig(opts...)
	return t.start(ctx, name, c.SpanKind(), c.Attributes(), c.Links(), c.NewRoot(), c.Timestamp())
}

func (t *otelTracer) start(ctx context.Context, name string, kind trace.SpanKind, attrs []attribute.KeyValue, links []trace.Link, newRoot bool, ts time.Time) (context.Context, trace.Span) {
	if kind == trace.SpanKindUnspecified {
		kind = trace.SpanKindInternal
	}
	pctx := ctx
	parent := trace.SpanContextFromContext(ctx)
	if newRoot {
		parent = trace.SpanContext{}
		pctx = trace.ContextWithSpanContext(ctx, parent)
	}
	cfg := trace.SpanContextConfig{}
	if parent.IsValid() {
		cfg.TraceID = parent.TraceID()
	} else {
		for !cfg.TraceID.IsValid() {
			binary.LittleEndian.PutUint64(cfg.TraceID[:8], rand.Uint64())
			binary.LittleEndian.PutUint64(cfg.TraceID[8:], rand.Uint64())
		}
	}
	for !cfg.SpanID.IsValid() {
		binary.LittleEndian.PutUint64(cfg.SpanID[:], rand.Uint64())
	}
	res := t.p.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: pctx, TraceID: cfg.TraceID, Name: name, Kind: kind, Attributes: attrs, Links: links})
	cfg.TraceState = res.Tracestate
	cfg.TraceFlags = parent.TraceFlags() &^ trace.FlagsSampled
	if res.Decision == sdktrace.RecordAndSample {
		cfg.TraceFlags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(cfg)
	if res.Decision == sdktrace.Drop || t.p.shut.Load() {
		s := &idSpan{sc: sc}
		return trace.ContextWithSpan(ctx, s), s
	}
	if ts.IsZero() {
		ts = time.Now()
	}
	s := &span{t: t, sc: sc, parent: parent, name: name, kind: kind, start: ts}
	s.attrs = s.inline[:0]
	s.setAttributes(attrs)
	s.setAttributes(res.Attributes)
	for _, l := range links {
		s.addLink(l)
	}
	return trace.ContextWithSpan(ctx, s), s
}

// span is a recording span. After End it is read, without its lock, by
// the exporter only: nothing changes it once ended.
type span struct {
	embedded.Span
	t      *otelTracer
	sc     trace.SpanContext
	parent trace.SpanContext
	kind   trace.SpanKind
	start  time.Time

	mu            sync.Mutex
	name          string
	end           time.Time
	ended         bool
	code          codes.Code
	desc          string
	attrs         []attribute.KeyValue
	droppedAttrs  int
	events        []event
	droppedEvents int
	links         []trace.Link
	droppedLinks  int
	// inline holds the attributes of a typical span (the LLM proxy's has
	// 13 to 16): the span is then one allocation.
	inline [16]attribute.KeyValue
}

type event struct {
	name    string
	time    time.Time
	attrs   []attribute.KeyValue
	dropped int
}

func (s *span) SpanContext() trace.SpanContext { return s.sc }

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

func (s *span) End(opts ...trace.SpanEndOption) {
	// The end time on the monotonic clock, as the SDK takes it.
	end := s.start.Add(time.Since(s.start))
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	if recovered := recover(); recovered != nil {
		// Record but do not stop the panic (as the SDK does).
		defer panic(recovered)
		s.addEvent("exception", time.Now(), []attribute.KeyValue{
			attribute.String("exception.type", typeStr(recovered)), attribute.String("exception.message", fmt.Sprint(recovered))})
	}
	if len(opts) > 0 {
		if c := trace.NewSpanEndConfig(opts...); !c.Timestamp().IsZero() {
			ts := c.Timestamp()
			end = ts
		}
	}
	s.end, s.ended = end, true
	s.mu.Unlock()
	if s.sc.IsSampled() {
		s.t.p.bsp.add(s)
	}
}

func (s *span) SetStatus(code codes.Code, desc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// As the SDK: Ok is final, Unset never overrides, only Error keeps a
	// description.
	if s.ended || code == codes.Unset || s.code == codes.Ok {
		return
	}
	s.code, s.desc = code, ""
	if code == codes.Error {
		s.desc = desc
	}
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.setAttributes(kv)
	}
}

// setAttributes adds kv, a key already set keeping its place and taking
// the new value (the API's rule), past the count limit dropped.
func (s *span) setAttributes(kv []attribute.KeyValue) {
	s.attrs, s.droppedAttrs = addAttrs(s.attrs, s.droppedAttrs, kv, s.t.p.limits.AttributeCountLimit, s.t.p.limits.AttributeValueLengthLimit)
}

func addAttrs(dst []attribute.KeyValue, dropped int, kv []attribute.KeyValue, limit, maxLen int) ([]attribute.KeyValue, int) {
next:
	for _, a := range kv {
		if !a.Valid() {
			dropped++
			continue
		}
		if maxLen >= 0 {
			a = truncate(a, maxLen)
		}
		for i := range dst {
			if dst[i].Key == a.Key {
				dst[i] = a
				continue next
			}
		}
		if limit >= 0 && len(dst) >= limit {
			dropped++
			continue
		}
		dst = append(dst, a)
	}
	return dst, dropped
}

// truncate cuts string values to maxLen characters.
func truncate(a attribute.KeyValue, maxLen int) attribute.KeyValue {
	cut := func(s string) string {
		if len(s) <= maxLen {
			return s
		}
		n := 0
		for i := range s {
			if n == maxLen {
				return s[:i]
			}
			n++
		}
		return s
	}
	switch a.Value.Type() {
	case attribute.STRING:
		if v := a.Value.AsString(); utf8.RuneCountInString(v) > maxLen {
			return a.Key.String(cut(v))
		}
	case attribute.STRINGSLICE:
		v := a.Value.AsStringSlice()
		for i := range v {
			v[i] = cut(v[i])
		}
		return a.Key.StringSlice(v)
	}
	return a
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	ts := c.Timestamp()
	if ts.IsZero() {
		ts = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addEvent(name, ts, c.Attributes())
	}
}

func (s *span) addEvent(name string, ts time.Time, attrs []attribute.KeyValue) {
	l := s.t.p.limits
	if l.EventCountLimit >= 0 && len(s.events) >= l.EventCountLimit {
		s.droppedEvents++
		return
	}
	e := event{name: name, time: ts}
	e.attrs, e.dropped = addAttrs(nil, 0, attrs, l.AttributePerEventCountLimit, l.AttributeValueLengthLimit)
	s.events = append(s.events, e)
}

func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	c := trace.NewEventConfig(opts...)
	ts := c.Timestamp()
	if ts.IsZero() {
		ts = time.Now()
	}
	attrs := append(c.Attributes(), attribute.String("exception.type", typeStr(err)), attribute.String("exception.message", err.Error()))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addEvent("exception", ts, attrs)
	}
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addLink(l)
	}
}

func (s *span) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() {
		return
	}
	lim := s.t.p.limits
	if lim.LinkCountLimit >= 0 && len(s.links) >= lim.LinkCountLimit {
		s.droppedLinks++
		return
	}
	l.Attributes, _ = addAttrs(nil, 0, l.Attributes, lim.AttributePerLinkCountLimit, lim.AttributeValueLengthLimit)
	s.links = append(s.links, l)
}

func (s *span) TracerProvider() trace.TracerProvider { return s.t.p }

func typeStr(i any) string {
	t := reflect.TypeOf(i)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}
