package tracing

import (
	"context"
	"encoding/hex"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

var w3c propagation.TraceContext

// Traceparent is the W3C traceparent of ctx's span, "" if it has none.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return traceparent(sc)
}

func traceparent(sc trace.SpanContext) string {
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// Inject sets the traceparent (and tracestate) of ctx's span on h.
func Inject(ctx context.Context, h http.Header) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	h["Traceparent"] = []string{traceparent(sc)}
	if ts := sc.TraceState(); ts.Len() > 0 {
		h["Tracestate"] = []string{ts.String()}
	}
}

// Extract returns ctx with the remote parent h's traceparent names, or
// ctx unchanged when h has none (or a malformed one).
func Extract(ctx context.Context, h http.Header) context.Context {
	if h.Get("traceparent") == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// WithTraceparent returns ctx with tp as its remote parent; a malformed
// or empty tp leaves ctx unchanged.
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Middleware makes a request's traceparent the parent of the spans its
// handler starts: a caller's, or an agent's calling the LLM proxy or the
// tool API, so the agent's own spans join the run's trace.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(Extract(r.Context(), r.Header))
		}
		next.ServeHTTP(w, r)
	})
}
