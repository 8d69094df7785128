//go:build pprof

package main

// A profiling build for benchmarks (go build -tags pprof ./cmd/agentplane):
// with AGENTPLANE_BENCH_PPROF=127.0.0.1:6061 it serves net/http/pprof on that
// address. The shipped binary has no such listener.

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("AGENTPLANE_BENCH_PPROF"); addr != "" {
		go http.ListenAndServe(addr, nil)
	}
}
