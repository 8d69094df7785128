// Package otlprecv is a small OTLP/HTTP trace receiver (protobuf, as the
// standard exporter sends it) for tests and benchmarks: it decodes every
// ExportTraceServiceRequest and keeps the spans.
package otlprecv

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, ids in hex.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Service                       string // the resource's service.name
	Kind                          int32
	Error                         bool // status ERROR
	StatusMessage                 string
	Attrs                         map[string]string
}

func (s Span) String() string {
	return fmt.Sprintf("%s[%s %s←%s %s]", s.Name, s.TraceID[:8], s.SpanID, s.ParentSpanID, s.Service)
}

// Receiver is an http.Handler for POST /v1/traces.
type Receiver struct {
	mu       sync.Mutex
	spans    []Span
	requests int
	// Discard keeps no spans, only counts them (a benchmark's receiver).
	Discard bool
	count   int
}

func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	n := 0
	for _, rs := range req.ResourceSpans {
		service := ""
		if rs.Resource != nil {
			service = attrs(rs.Resource.Attributes)["service.name"]
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				n++
				if rc.Discard {
					continue
				}
				s := Span{TraceID: hex.EncodeToString(sp.TraceId), SpanID: hex.EncodeToString(sp.SpanId), ParentSpanID: hex.EncodeToString(sp.ParentSpanId),
					Name: sp.Name, Service: service, Kind: int32(sp.Kind), Attrs: attrs(sp.Attributes)}
				if sp.Status != nil {
					s.Error = sp.Status.Code == 2
					s.StatusMessage = sp.Status.Message
				}
				got = append(got, s)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.requests++
	rc.count += n
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns a copy of the spans received so far.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Span(nil), rc.spans...)
}

// Count is how many spans and export requests were received.
func (rc *Receiver) Count() (spans, requests int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.count, rc.requests
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		}
	}
	return m
}
