package tracing

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newTestProvider is a provider exporting to exp, as Setup builds one.
func newTestProvider(exp spanExporter, getenv func(string) string) *provider {
	p := &provider{sampler: samplerFromEnv(getenv), limits: sdktrace.NewSpanLimits(), resource: resource.Default(), tracers: map[scopeKey]*otelTracer{}}
	p.bsp = newBatcher(exp, getenv)
	return p
}

// A full batch is exported at once, without waiting for the timer; what
// is left goes at shutdown; past the queue's size spans are dropped.
func TestBatcher(t *testing.T) {
	exp := &countingExporter{}
	p := newTestProvider(exp, func(k string) string {
		return map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"}[k]
	})
	b, tr := p.bsp, p.Tracer("t")
	for range 4 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	for deadline := time.Now().Add(5 * time.Second); len(exp.GetSpans()) < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a full batch was not exported: %d spans", len(exp.GetSpans()))
		}
	}
	// Hold the exporter so nothing leaves while the queue fills past 10.
	b.exporting.Lock()
	for range 13 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	b.exporting.Unlock()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 4+10 {
		t.Fatalf("exported %d spans, want 14 (3 dropped at the full queue)", n)
	}
	if !exp.shut {
		t.Fatal("exporter not shut down")
	}
}

// countingExporter keeps what it was sent.
type countingExporter struct {
	mu    sync.Mutex
	spans []*span
	shut  bool
}

func (e *countingExporter) export(_ context.Context, s []*span) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spans = append(e.spans, s...)
	return nil
}

func (e *countingExporter) shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shut = true
	return nil
}

func (e *countingExporter) GetSpans() []*span {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*span(nil), e.spans...)
}
