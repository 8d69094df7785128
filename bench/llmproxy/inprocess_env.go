package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/llmproxy"
)

const agentKey = "ak_bench"

// env is the three targets, each a real HTTP server on loopback.
type env struct {
	upstream, reverse, proxy string // base URLs ending in /v1
	rec                      *batchRecorder
	p                        *llmproxy.Proxy
	servers                  []*http.Server
}

func serve(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	// No WriteTimeout: it would cut streams (as in the real server).
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = s.Serve(ln) }()
	return s, "http://" + ln.Addr().String() + "/v1", nil
}

// upstreamTransport is what both proxies use to reach the fake: the same
// pool sizing, so the comparison is of the proxies, not their pools.
func upstreamTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// fullDuplex lets h read the request body after the answer has begun. The
// transport reads a request body once more after sending it (to check it was
// not longer than declared); when the upstream answers first and the proxy
// has written the answer's headers, net/http has closed that body, the read
// fails, and the transport tears down the upstream connection with the answer
// half relayed (golang/go#40747): 0.2-1 % of the baseline's streams were cut
// that way. agentplane reads the whole body before it calls the upstream.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		h.ServeHTTP(w, r)
	})
}

func startEnv() (*env, error) {
	e := &env{}
	up, upURL, err := serve(fakellm.New(fakellm.Options{}))
	if err != nil {
		return nil, err
	}
	e.servers = append(e.servers, up)
	e.upstream = upURL

	target, _ := url.Parse(strings.TrimSuffix(upURL, "/v1"))
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		// FlushInterval 0, the default: SSE answers are flushed on every
		// write anyway (ReverseProxy detects text/event-stream), JSON ones
		// are not flushed mid-body.
		Transport: upstreamTransport(),
	}
	rs, rpURL, err := serve(fullDuplex(rp))
	if err != nil {
		return nil, err
	}
	e.servers = append(e.servers, rs)
	e.reverse = rpURL

	e.rec = newBatchRecorder()
	cfg := llmproxy.ConfigFromEnv(upURL, "sk-bench")
	cfg.Prices = map[string]llmproxy.Price{"fake-gpt": {Input: 2.5, CachedInput: 1.25, Output: 10}}
	keys := map[string]string{agentKey: "bench-agent"}
	auth := func(r *http.Request) (llmproxy.Caller, error) {
		agent, ok := keys[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			return llmproxy.Caller{}, &llmproxy.Error{Status: 401, Code: "unauthorized", Message: "unknown key"}
		}
		return llmproxy.Caller{AgentID: agent, RunID: r.Header.Get("X-Run-Id")}, nil
	}
	e.p, err = llmproxy.New(cfg, auth, e.rec)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	e.p.Routes(mux)
	ps, pURL, err := serve(mux)
	if err != nil {
		return nil, err
	}
	e.servers = append(e.servers, ps)
	e.proxy = pURL
	return e, nil
}

func (e *env) close() {
	for _, s := range e.servers {
		_ = s.Close()
	}
	e.p.Close()
	e.rec.Close()
}

// batchRecorder is a stand-in for the event log's writer: Record only
// enqueues; one goroutine drains batches (up to 256 events or every 20 ms)
// and serialises each payload, which is the CPU the real one spends before
// its database insert.
type batchRecorder struct {
	ch      chan recEvent
	done    chan struct{}
	written atomic.Int64
	calls   atomic.Int64 // llm_call_done events written
	dropped atomic.Int64
	bytes   atomic.Int64
}

type recEvent struct {
	c       llmproxy.Caller
	typ     string
	payload any
}

func newBatchRecorder() *batchRecorder {
	r := &batchRecorder{ch: make(chan recEvent, 1<<16), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *batchRecorder) Record(c llmproxy.Caller, typ string, payload any) {
	select {
	case r.ch <- recEvent{c, typ, payload}:
	default:
		r.dropped.Add(1) // the real writer must not drop; here it tells us the writer fell behind
	}
}

func (r *batchRecorder) loop() {
	defer close(r.done)
	batch := make([]recEvent, 0, 256)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	flush := func() {
		for _, ev := range batch {
			b, _ := json.Marshal(ev.payload)
			r.bytes.Add(int64(len(b)))
			if ev.typ == llmproxy.EventCallDone {
				r.calls.Add(1)
			}
		}
		r.written.Add(int64(len(batch)))
		batch = batch[:0]
	}
	for {
		select {
		case ev, ok := <-r.ch:
			if !ok {
				flush()
				return
			}
			batch = append(batch, ev)
			if len(batch) == cap(batch) {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Close flushes what is queued, as the real one does on shutdown.
func (r *batchRecorder) Close() {
	close(r.ch)
	<-r.done
}

var errStatus = errors.New("unexpected status")
