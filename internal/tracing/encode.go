package tracing

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// OTLP protobuf encoded by hand (opentelemetry/proto/trace/v1/trace.proto,
// common/v1/common.proto, resource/v1/resource.proto) from the spans as
// they are, into one reused buffer: no intermediate proto structs. The
// test TestEncodingMatchesOTLPProto decodes it with the official types.

// Field numbers.
const (
	// ResourceSpans
	rsResource   = 1
	rsScopeSpans = 2
	rsSchemaURL  = 3
	// Resource, InstrumentationScope
	resAttributes   = 1
	scopeName       = 1
	scopeVersion    = 2
	scopeAttributes = 3
	// ScopeSpans
	ssScope     = 1
	ssSpans     = 2
	ssSchemaURL = 3
	// Span
	spTraceID      = 1
	spSpanID       = 2
	spTraceState   = 3
	spParentSpanID = 4
	spName         = 5
	spKind         = 6
	spStart        = 7
	spEnd          = 8
	spAttributes   = 9
	spDroppedAttrs = 10
	spEvents       = 11
	spDroppedEvs   = 12
	spLinks        = 13
	spDroppedLinks = 14
	spStatus       = 15
	spFlags        = 16
	// Span.Event
	evTime         = 1
	evName         = 2
	evAttributes   = 3
	evDroppedAttrs = 4
	// Span.Link
	lkTraceID    = 1
	lkSpanID     = 2
	lkTraceState = 3
	lkAttributes = 4
	lkFlags      = 6
	// Status
	stMessage = 2
	stCode    = 3
	// KeyValue, AnyValue, ArrayValue, KeyValueList
	kvKey      = 1
	kvValue    = 2
	avString   = 1
	avBool     = 2
	avInt      = 3
	avDouble   = 4
	avArray    = 5
	avKvlist   = 6
	avBytes    = 7
	arrValues  = 1
	kvlsValues = 1
)

// SpanFlags bits (trace.proto): the parent's remoteness is known, and is
// remote.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// begin starts a length-delimited field; end closes it. The length is
// given one byte first and moved up in the rare case it needs more.
func begin(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return append(b, 0), len(b) + 1
}

func end(b []byte, start int) []byte {
	n := len(b) - start
	if n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	for range extra {
		b = append(b, 0)
	}
	copy(b[start+extra:], b[start:start+n])
	protowire.AppendVarint(b[:start-1], uint64(n))
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

func clampUint32(n int) uint64 { return uint64(min(max(n, 0), math.MaxUint32)) }

func appendKeyValues(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendKeyValue(b, num, string(kv.Key), kv.Value)
	}
	return b
}

func appendKeyValue(b []byte, num protowire.Number, key string, v attribute.Value) []byte {
	b, at := begin(b, num)
	b = appendString(b, kvKey, key)
	b, av := begin(b, kvValue)
	b = appendAnyValue(b, v)
	return end(end(b, av), at)
}

// appendAnyValue encodes v's oneof field (the inside of an AnyValue).
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, avBool, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, avInt, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, avDouble, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		// A oneof field is set even when empty.
		b = protowire.AppendTag(b, avString, protowire.BytesType)
		return protowire.AppendString(b, v.AsString())
	case attribute.BYTESLICE:
		return appendBytes(b, avBytes, v.AsByteSlice())
	case attribute.BOOLSLICE:
		return appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		return appendArray(b, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		b, kl := begin(b, avKvlist)
		b = appendKeyValues(b, kvlsValues, v.AsMap())
		return end(b, kl)
	}
	return b // EMPTY: an AnyValue with nothing set
}

func appendElem(b []byte, v attribute.Value) []byte {
	b, at := begin(b, arrValues)
	return end(appendAnyValue(b, v), at)
}

// appendArray appends xs as an ArrayValue, each element made a Value by val.
func appendArray[T any](b []byte, xs []T, val func(T) attribute.Value) []byte {
	b, arr := begin(b, avArray)
	for _, x := range xs {
		b = appendElem(b, val(x))
	}
	return end(b, arr)
}

// encodeResource is a Resource message, field rsResource of ResourceSpans.
func encodeResource(res *resource.Resource) []byte {
	b, at := begin(nil, rsResource)
	for _, kv := range res.Attributes() {
		b = appendKeyValue(b, resAttributes, string(kv.Key), kv.Value)
	}
	return end(b, at)
}

// encodeScope is an InstrumentationScope message, field ssScope of
// ScopeSpans.
func encodeScope(name, version string, attrs attribute.Set) []byte {
	b, at := begin(nil, ssScope)
	b = appendString(b, scopeName, name)
	b = appendString(b, scopeVersion, version)
	for _, kv := range attrs.ToSlice() {
		b = appendKeyValue(b, scopeAttributes, string(kv.Key), kv.Value)
	}
	return end(b, at)
}

// appendResourceSpans appends the inside of one ResourceSpans message
// holding spans, grouped by their tracers' scopes.
func appendResourceSpans(b []byte, res []byte, schemaURL string, spans []*span) []byte {
	b = append(b, res...)
	done := 0
	for i, s := range spans {
		if s == nil {
			continue
		}
		t := s.t
		var ss int
		b, ss = begin(b, rsScopeSpans)
		b = append(b, t.scope...)
		for j := i; j < len(spans); j++ {
			if spans[j] != nil && spans[j].t == t {
				b = appendSpan(b, spans[j])
				if j != i {
					spans[j] = nil // grouped: skip it later
				}
				done++
			}
		}
		b = appendString(b, ssSchemaURL, t.schemaURL)
		b = end(b, ss)
		if done == len(spans) {
			break
		}
	}
	return appendString(b, rsSchemaURL, schemaURL)
}

func appendSpan(b []byte, s *span) []byte {
	b, at := begin(b, ssSpans)
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = appendBytes(b, spTraceID, tid[:])
	b = appendBytes(b, spSpanID, sid[:])
	if ts := s.sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, spTraceState, ts.String())
	}
	if psid := s.parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, spParentSpanID, psid[:])
	}
	b = appendString(b, spName, s.name)
	b = appendUint(b, spKind, uint64(s.kind))
	b = appendFixed64(b, spStart, unixNano(s.start))
	b = appendFixed64(b, spEnd, unixNano(s.end))
	b = appendKeyValues(b, spAttributes, s.attrs)
	b = appendUint(b, spDroppedAttrs, clampUint32(s.droppedAttrs))
	for _, e := range s.events {
		var ev int
		b, ev = begin(b, spEvents)
		b = appendFixed64(b, evTime, unixNano(e.time))
		b = appendString(b, evName, e.name)
		b = appendKeyValues(b, evAttributes, e.attrs)
		b = appendUint(b, evDroppedAttrs, clampUint32(e.dropped))
		b = end(b, ev)
	}
	b = appendUint(b, spDroppedEvs, clampUint32(s.droppedEvents))
	for _, l := range s.links {
		var lk int
		b, lk = begin(b, spLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytes(b, lkTraceID, ltid[:])
		b = appendBytes(b, lkSpanID, lsid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			b = appendString(b, lkTraceState, ts.String())
		}
		b = appendKeyValues(b, lkAttributes, l.Attributes)
		b = protowire.AppendTag(b, lkFlags, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = end(b, lk)
	}
	b = appendUint(b, spDroppedLinks, clampUint32(s.droppedLinks))
	// Status is always present, as the SDK's exporter sends it.
	b, st := begin(b, spStatus)
	b = appendString(b, stMessage, s.desc)
	b = appendUint(b, stCode, statusCode(s.code))
	b = end(b, st)
	b = protowire.AppendTag(b, spFlags, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, spanFlags(s.sc.TraceFlags(), s.parent))
	return end(b, at)
}

func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

// spanFlags are the W3C trace flags and whether the parent is remote, as
// the SDK's exporter sets them.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}
