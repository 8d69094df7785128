package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// OTEL_TRACES_SAMPLER and its argument decide which spans record and
// are exported; a dropped span still has real ids in its parent's trace.
func TestSamplerFromEnv(t *testing.T) {
	sampled := WithTraceparent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	unsampled := WithTraceparent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	for _, c := range []struct {
		sampler, arg        string
		root, child, orphan bool // recording: a new trace, a sampled parent's child, an unsampled parent's child
	}{
		{"", "", true, true, false},
		{"always_on", "", true, true, true},
		{"always_off", "", false, false, false},
		{"traceidratio", "0", false, false, false},
		{"parentbased_always_off", "", false, true, false},
		{"parentbased_traceidratio", "0", false, true, false},
		{"parentbased_traceidratio", "1", true, true, false},
		{"nonsense", "", true, true, false},
	} {
		exp := &countingExporter{}
		p := newTestProvider(exp, env(map[string]string{"OTEL_TRACES_SAMPLER": c.sampler, "OTEL_TRACES_SAMPLER_ARG": c.arg}))
		tr := p.Tracer("t")
		want := 0
		for i, ctx := range []context.Context{context.Background(), sampled, unsampled} {
			_, s := tr.Start(ctx, "s")
			rec := []bool{c.root, c.child, c.orphan}[i]
			if s.IsRecording() != rec || s.SpanContext().IsSampled() != rec || !s.SpanContext().IsValid() {
				t.Errorf("%s %s, parent %d: recording %v sampled %v, want %v", c.sampler, c.arg, i, s.IsRecording(), s.SpanContext().IsSampled(), rec)
			}
			if i > 0 && s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
				t.Errorf("%s: child left its parent's trace", c.sampler)
			}
			s.End()
			if rec {
				want++
			}
		}
		if err := p.bsp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(exp.GetSpans()); n != want {
			t.Errorf("%s %s: exported %d spans, want %d", c.sampler, c.arg, n, want)
		}
	}
}

// The span limits (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT,
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, ...) hold; a key set again keeps its
// place with the new value even at the limit.
func TestSpanLimits(t *testing.T) {
	t.Setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "3")
	t.Setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
	t.Setenv("OTEL_SPAN_EVENT_COUNT_LIMIT", "1")
	exp := &countingExporter{}
	p := newTestProvider(exp, env(nil))
	_, s := p.Tracer("t").Start(context.Background(), "s", trace.WithAttributes(attribute.String("a", "héllo wörld"), attribute.Int("b", 1)))
	s.SetAttributes(attribute.StringSlice("c", []string{"abcdef", "x"}), attribute.Int("d", 4), attribute.Int("b", 2))
	s.AddEvent("one")
	s.AddEvent("two")
	s.End()
	if err := p.bsp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := exp.GetSpans()[0]
	var kv []string
	for _, a := range got.attrs {
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	if s := strings.Join(kv, " "); s != `a=héll b=2 c=["abcd","x"]` || got.droppedAttrs != 1 {
		t.Fatalf("attributes %s, %d dropped", s, got.droppedAttrs)
	}
	if len(got.events) != 1 || got.events[0].name != "one" || got.droppedEvents != 1 {
		t.Fatalf("events %v, %d dropped", got.events, got.droppedEvents)
	}
	p.shut.Store(true) // as Setup's shutdown does
	if _, s := p.Tracer("t").Start(context.Background(), "late"); s.IsRecording() || !s.SpanContext().IsValid() {
		t.Fatalf("a span after shutdown: recording %v, %v", s.IsRecording(), s.SpanContext())
	}
}
