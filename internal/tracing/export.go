package tracing

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// otlpExporter encodes a batch into one reused buffer (encode.go) and
// sends it with the standard OTLP/HTTP client, which keeps the transport
// and all its OTEL_EXPORTER_OTLP_* settings (endpoint, headers, TLS,
// compression, timeout, retries, partial success). The client takes
// proto structs; it is given one ResourceSpans whose encoding is the
// buffer, as unknown fields, which protobuf marshals byte for byte: the
// request on the wire is the same ExportTraceServiceRequest.
type otlpExporter struct {
	client    otlptrace.Client
	res       []byte // the encoded Resource
	schemaURL string
	// json: OTLP/HTTP with JSON bodies, where unknown fields do not
	// survive: the buffer is decoded into the proto structs instead.
	json bool
	buf  []byte
}

func newOTLPExporter(client otlptrace.Client, p *provider) *otlpExporter {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	return &otlpExporter{client: client, res: encodeResource(p.resource), schemaURL: p.resource.SchemaURL(), json: protocol == "http/json"}
}

func (e *otlpExporter) export(ctx context.Context, spans []*span) error {
	e.buf = appendResourceSpans(e.buf[:0], e.res, e.schemaURL, spans)
	rs := &tracepb.ResourceSpans{}
	if e.json {
		if err := proto.Unmarshal(e.buf, rs); err != nil {
			return err
		}
	} else {
		rs.ProtoReflect().SetUnknown(protoreflect.RawFields(e.buf))
	}
	return e.client.UploadTraces(ctx, []*tracepb.ResourceSpans{rs})
}

func (e *otlpExporter) shutdown(ctx context.Context) error { return e.client.Stop(ctx) }
