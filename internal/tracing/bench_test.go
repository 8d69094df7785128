package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// llmSpan is what the LLM proxy does per call: a span from the request's
// traceparent with the proxy's attributes, the traceparent injected into
// the upstream request, ended with the usage.
func llmSpan(ctx context.Context) {
	ctx, span := Start(ctx, "chat fake-gpt", trace.SpanKindClient)
	if span.IsRecording() {
		SetAttributes(span, attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.request.model", "fake-gpt"),
			RunID.String("run_01a20e4c87e8748c8b5ad0ce7f295dae"), SessionID.String("ses_01a20e4c87e87477a76e2431ad4e5550"), AgentID.String("bench"),
			attribute.String("agentplane.llm_call_id", "llm_01a20e4c87e8748c8b5ad0ce7f295dae"), attribute.Bool("agentplane.stream", true))
	}
	h := http.Header{}
	Inject(ctx, h)
	if span.IsRecording() {
		SetAttributes(span, attribute.String("gen_ai.response.model", "fake-gpt"), Outcome.String("ok"), attribute.Int("http.response.status_code", 200),
			attribute.String("agentplane.upstream", "default"), attribute.Int64("gen_ai.usage.input_tokens", 12), attribute.Int64("gen_ai.usage.output_tokens", 40))
	}
	span.End()
}

// The per-call cost of tracing in the proxy, nothing exported (the
// id-only tracer) and exported over OTLP/HTTP to a receiver
// (micro-benchmark: the export's marshalling and HTTP posts run on other
// goroutines of the same two cores, so they count in the time per op).
func BenchmarkLLMSpan(b *testing.B) {
	parent := WithTraceparent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	b.Run("disabled", func(b *testing.B) {
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			llmSpan(parent)
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("exported", func(b *testing.B) {
		// The collector is another process in production: this one reads
		// the requests without decoding them, so its cost stays small.
		var posts atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			posts.Add(1)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer srv.Close()
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
		// A queue no loop can fill: every span is exported, none dropped.
		shutdown, err := Setup(context.Background(), func(k string) string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_BSP_MAX_QUEUE_SIZE": "100000000"}[k]
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			llmSpan(parent)
		}
		// Every span exported, then the process's CPU per span: the
		// exporter's goroutines included.
		shutdown(context.Background())
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		b.StopTimer()
		if posts.Load() == 0 {
			b.Fatal("nothing exported")
		}
	})
}

// processCPU is this process's user+system CPU time in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
