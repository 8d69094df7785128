package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// The hand encoding (encode.go), sent by the standard OTLP/HTTP client,
// decodes with the official OTLP proto types to exactly the spans
// recorded: names, ids, parents, kinds, times, attributes of every type,
// events, links, status, flags, resource and scopes.
func TestEncodingMatchesOTLPProto(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("request %s %q", r.URL.Path, r.Header.Get("Content-Type"))
		}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	client := otlptracehttp.NewClient()
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "3600000"}[k] }
	p := newTestProvider(nil, getenv)
	p.resource = resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0", attribute.String("service.name", "enc-test"), attribute.Int("n", 7))
	p.bsp = newBatcher(newOTLPExporter(client, p), getenv)
	p.limits.AttributeCountLimit = 20

	t0 := time.Unix(1_700_000_000, 123456789)
	remote := WithTraceparent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	tr := p.Tracer("github.com/agentplane/agentplane")
	other := p.Tracer("other", trace.WithInstrumentationVersion("1.2.3"), trace.WithSchemaURL("https://example.com/s"))

	long := string(make([]byte, 300)) // a string longer than one length byte
	ctx, server := tr.Start(remote, "server", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0),
		trace.WithAttributes(RunID.String("run_1"), attribute.Bool("b", true), attribute.Int64("i", -42), attribute.Float64("f", 1.5),
			attribute.String("empty", ""), attribute.String("long", long), attribute.StringSlice("ss", []string{"a", ""}),
			attribute.Int64Slice("is", []int64{1, -2}), attribute.BoolSlice("bs", []bool{true, false}), attribute.Float64Slice("fs", []float64{0.25})))
	server.SetAttributes(attribute.Int64("i", 43), attribute.String("later", "x")) // i overwritten in place
	server.SetAttributes(attribute.KeyValue{})                                     // invalid: dropped
	server.AddEvent("ev", trace.WithTimestamp(t0.Add(time.Millisecond)), trace.WithAttributes(attribute.String("k", "v")))
	server.RecordError(errors.New("boom"), trace.WithTimestamp(t0.Add(2*time.Millisecond)))
	server.SetStatus(codes.Ok, "ignored for Ok")
	_, client1 := tr.Start(ctx, "client", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(t0.Add(time.Microsecond)),
		trace.WithLinks(trace.Link{SpanContext: server.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("l", "1")}}))
	client1.SetStatus(codes.Error, "tool_error")
	client1.End(trace.WithTimestamp(t0.Add(3 * time.Millisecond)))
	_, o := other.Start(context.Background(), "other-root", trace.WithTimestamp(t0))
	o.End(trace.WithTimestamp(t0.Add(time.Second)))
	server.End(trace.WithTimestamp(t0.Add(4 * time.Millisecond)))
	server.SetAttributes(attribute.String("after", "end")) // ignored
	if err := p.bsp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 1 {
		t.Fatalf("%d requests, want 1", len(bodies))
	}
	var got coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(bodies[0], &got); err != nil {
		t.Fatal(err)
	}

	ns := func(d time.Duration) uint64 { return uint64(t0.Add(d).UnixNano()) }
	id := func(sc trace.SpanContext) ([]byte, []byte) {
		tid, sid := sc.TraceID(), sc.SpanID()
		return tid[:], sid[:]
	}
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	anyInt := func(v int64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}
	}
	anyBool := func(v bool) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}
	}
	anyStr := func(v string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}
	}
	anyArr := func(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
	}
	kv := func(k string, v *commonpb.AnyValue) *commonpb.KeyValue { return &commonpb.KeyValue{Key: k, Value: v} }
	stid, ssid := id(server.SpanContext())
	ctid, csid := id(client1.SpanContext())
	otid, osid := id(o.SpanContext())
	parent, _ := hexID("b7ad6b7169203331")
	want := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("n", anyInt(7)), str("service.name", "enc-test")}},
		SchemaUrl: "https://opentelemetry.io/schemas/1.37.0",
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: "github.com/agentplane/agentplane"},
			Spans: []*tracepb.Span{{
				TraceId: ctid, SpanId: csid, ParentSpanId: ssid, Name: "client", Kind: tracepb.Span_SPAN_KIND_CLIENT,
				StartTimeUnixNano: ns(time.Microsecond), EndTimeUnixNano: ns(3 * time.Millisecond),
				Links:  []*tracepb.Span_Link{{TraceId: stid, SpanId: ssid, Attributes: []*commonpb.KeyValue{str("l", "1")}, Flags: 0x101}},
				Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "tool_error"}, Flags: 0x101,
			}, {
				TraceId: stid, SpanId: ssid, ParentSpanId: parent, Name: "server", Kind: tracepb.Span_SPAN_KIND_SERVER,
				StartTimeUnixNano: ns(0), EndTimeUnixNano: ns(4 * time.Millisecond),
				Attributes: []*commonpb.KeyValue{str("agentplane.run_id", "run_1"), kv("b", anyBool(true)), kv("i", anyInt(43)),
					kv("f", &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 1.5}}), str("empty", ""), str("long", long),
					kv("ss", anyArr(anyStr("a"), anyStr(""))), kv("is", anyArr(anyInt(1), anyInt(-2))), kv("bs", anyArr(anyBool(true), anyBool(false))),
					kv("fs", anyArr(&commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.25}})), str("later", "x")},
				DroppedAttributesCount: 1,
				Events: []*tracepb.Span_Event{
					{TimeUnixNano: ns(time.Millisecond), Name: "ev", Attributes: []*commonpb.KeyValue{str("k", "v")}},
					{TimeUnixNano: ns(2 * time.Millisecond), Name: "exception", Attributes: []*commonpb.KeyValue{str("exception.type", "*errors.errorString"), str("exception.message", "boom")}},
				},
				Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}, Flags: 0x301,
			}},
		}, {
			Scope:     &commonpb.InstrumentationScope{Name: "other", Version: "1.2.3"},
			SchemaUrl: "https://example.com/s",
			Spans: []*tracepb.Span{{
				TraceId: otid, SpanId: osid, Name: "other-root", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
				StartTimeUnixNano: ns(0), EndTimeUnixNano: ns(time.Second), Status: &tracepb.Status{}, Flags: 0x101,
			}},
		}},
	}}}
	if !proto.Equal(want, &got) {
		t.Fatalf("decoded request differs:\nwant %s\ngot  %s", prototext.Format(want), prototext.Format(&got))
	}
	if !slices.Equal(stid, parentTrace(t)) {
		t.Fatalf("server span's trace %x is not the remote parent's", stid)
	}
}

func hexID(s string) ([]byte, error) {
	sid, err := trace.SpanIDFromHex(s)
	return sid[:], err
}

func parentTrace(t *testing.T) []byte {
	tid, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	if err != nil {
		t.Fatal(err)
	}
	return tid[:]
}

// With OTEL_EXPORTER_OTLP_PROTOCOL=http/json the client sends JSON,
// where a raw-bytes ResourceSpans would vanish: the spans still arrive.
func TestExportsHTTPJSON(t *testing.T) {
	var got struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []struct {
					Name, TraceID, ParentSpanID string
				}
			}
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	shutdown, err := Setup(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	_, s := Start(WithTraceparent(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), "json-span", trace.SpanKindClient)
	s.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got.ResourceSpans) != 1 || len(got.ResourceSpans[0].ScopeSpans) != 1 || len(got.ResourceSpans[0].ScopeSpans[0].Spans) != 1 {
		t.Fatalf("received %+v", got)
	}
	sp := got.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if sp.Name != "json-span" || !strings.EqualFold(sp.TraceID, "0af7651916cd43dd8448eb211c80319c") || !strings.EqualFold(sp.ParentSpanID, "b7ad6b7169203331") {
		t.Fatalf("span %+v", sp)
	}
}
