package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/agentplane/agentplane/internal/fakellm"
)

// The comparison's other processes are this tool re-executed with a
// subcommand, so each target is a process of its own, as in production:
//
//	llmproxy upstream           the fake OpenAI-compatible upstream
//	llmproxy reverse -target U  a bare httputil.ReverseProxy to U
//
// Each prints "listening on http://ADDR" once it accepts connections.

// serveChild listens on loopback, announces its address and serves h until
// killed.
func serveChild(h http.Handler) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	// No WriteTimeout: it would cut streams (as in the real server).
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func runUpstream() { serveChild(fakellm.New(fakellm.Options{})) }

// runReverse is the baseline: the standard library's reverse proxy with a
// transport tuned as a production deployment would tune it (large idle
// pool per host, no compression), so the comparison is of the proxies and
// not of a default connection pool.
func runReverse(target string) {
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serveChild(fullDuplex(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: upstreamTransport(),
	}))
}
