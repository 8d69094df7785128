package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/tracing/otlprecv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Without an OTLP endpoint no exporter exists and spans record nothing,
// yet they carry real ids: a child keeps its parent's trace, so the
// traceparent sent on is still a true link.
func TestDisabledMintsIDsOnly(t *testing.T) {
	shutdown, err := Setup(context.Background(), env(map[string]string{"OTEL_SERVICE_NAME": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if Enabled() {
		t.Fatal("enabled without an endpoint")
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		t.Fatal("an SDK tracer provider was installed without an endpoint")
	}
	if _, ok := (*tracer.Load()).(idTracer); !ok {
		t.Fatalf("tracer is %T, want the id-only tracer", *tracer.Load())
	}
	ctx, root := Start(context.Background(), "root", trace.SpanKindInternal)
	if root.IsRecording() || !root.SpanContext().IsValid() || !root.SpanContext().IsSampled() {
		t.Fatalf("root span: recording %v, context %+v", root.IsRecording(), root.SpanContext())
	}
	cctx, child := Start(ctx, "child", trace.SpanKindClient)
	if child.SpanContext().TraceID() != root.SpanContext().TraceID() || child.SpanContext().SpanID() == root.SpanContext().SpanID() {
		t.Fatalf("child %v of root %v", child.SpanContext(), root.SpanContext())
	}
	tp := Traceparent(cctx)
	if want := "00-" + root.SpanContext().TraceID().String() + "-" + child.SpanContext().SpanID().String() + "-01"; tp != want {
		t.Fatalf("traceparent %q, want %q", tp, want)
	}
	// A caller's traceparent (unsampled here) is continued as it is.
	in := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	_, s := Start(WithTraceparent(context.Background(), in), "run", trace.SpanKindInternal)
	if s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.SpanContext().IsSampled() {
		t.Fatalf("continued %v", s.SpanContext())
	}
	if got := Traceparent(WithTraceparent(context.Background(), "garbage")); got != "" {
		t.Fatalf("malformed traceparent continued as %q", got)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, spans reach an OTLP/HTTP receiver
// when the provider shuts down, with their parent links.
func TestExportsOverOTLPHTTP(t *testing.T) {
	rc := &otlprecv.Receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	shutdown, err := Setup(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_SERVICE_NAME": "ap-test"}))
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("not enabled with an endpoint")
	}
	// A request's traceparent becomes the parent (Middleware).
	caller := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var sent http.Header
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := Start(r.Context(), "server", trace.SpanKindServer, RunID.String("run_1"))
		_, child := Start(ctx, "client", trace.SpanKindClient)
		sent = http.Header{}
		Inject(trace.ContextWithSpan(ctx, child), sent)
		Fail(child, "tool_error")
		child.End()
		span.End()
	}))
	req := httptest.NewRequest("POST", "/x", nil)
	req.Header.Set("traceparent", caller)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if Enabled() {
		t.Fatal("still enabled after shutdown")
	}
	spans := rc.Spans()
	if len(spans) != 2 {
		t.Fatalf("received %v", spans)
	}
	byName := map[string]otlprecv.Span{}
	for _, s := range spans {
		byName[s.Name] = s
		if s.TraceID != "0af7651916cd43dd8448eb211c80319c" || s.Service != "ap-test" {
			t.Errorf("span %v: trace or service wrong", s)
		}
	}
	server, client := byName["server"], byName["client"]
	if server.ParentSpanID != "b7ad6b7169203331" || client.ParentSpanID != server.SpanID || server.Attrs["agentplane.run_id"] != "run_1" {
		t.Fatalf("links: server %v %v, client %v", server, server.Attrs, client)
	}
	if !client.Error || client.StatusMessage != "tool_error" || server.Error {
		t.Fatalf("status: client %v %q, server %v", client.Error, client.StatusMessage, server.Error)
	}
	if want := "00-0af7651916cd43dd8448eb211c80319c-" + client.SpanID + "-01"; sent.Get("traceparent") != want {
		t.Fatalf("injected %q, want %q", sent.Get("traceparent"), want)
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(LogHandler{slog.NewJSONHandler(&buf, nil)}).With("run_id", "run_1")
	ctx, span := Start(context.Background(), "run", trace.SpanKindInternal)
	lg.InfoContext(ctx, "hello")
	lg.Info("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if first["trace_id"] != span.SpanContext().TraceID().String() || first["span_id"] != span.SpanContext().SpanID().String() || first["run_id"] != "run_1" {
		t.Fatalf("line %v", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Fatalf("trace_id without a span: %v", second)
	}
}
