package tracing

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A full batch is exported at once, without waiting for the timer; what
// is left goes at shutdown; past the queue's size spans are dropped.
func TestBatcher(t *testing.T) {
	exp := &countingExporter{}
	b := newBatcher(exp, func(k string) string {
		return map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"}[k]
	})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	tr := tp.Tracer("t")
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
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 4+10 {
		t.Fatalf("exported %d spans, want 14 (3 dropped at the full queue)", n)
	}
}

// countingExporter keeps what it was sent (the SDK's in-memory exporter
// forgets it at shutdown).
type countingExporter struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (e *countingExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spans = append(e.spans, s...)
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }

func (e *countingExporter) GetSpans() []sdktrace.ReadOnlySpan {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), e.spans...)
}
