package toolsvc

import (
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// benchHarness is a harness on dialect with an allowed server tool "echo"
// whose requests nobody waits to count.
func benchHarness(b *testing.B, dialect string) *harness {
	h := newHarness(b, dialect)
	go func() { // the harness reports each request it serves
		for range h.received {
		}
	}()
	h.put(tool.Definition{Name: "echo", Policy: tool.Policy{Decision: tool.DecisionAllow}})
	return h
}

// BenchmarkInvokeServerTool is one allowed server tool call, invoke to
// succeeded, in one live run, on each store: the tool service, the event
// log and the store of the real binary, without its HTTP front (a
// micro-benchmark; the product's figure is bench/tools, on the binary).
func BenchmarkInvokeServerTool(b *testing.B) {
	for _, d := range []string{"sqlite", "postgres"} {
		b.Run(d, func(b *testing.B) {
			h := benchHarness(b, d)
			r := h.newRun()
			for range 200 {
				h.mustInvoke(r, "echo", `{"a":1}`)
			}
			b.ResetTimer()
			for range b.N {
				h.mustInvoke(r, "echo", `{"a":1}`)
			}
		})
	}
}

// BenchmarkInvokeServerToolConcurrent is the same with 8 callers, each in
// a run of its own: what the callers' commits share.
func BenchmarkInvokeServerToolConcurrent(b *testing.B) {
	for _, d := range []string{"sqlite", "postgres"} {
		b.Run(d, func(b *testing.B) {
			h := benchHarness(b, d)
			runs := make(chan *store.Run, 64)
			for range 64 {
				runs <- h.newRun()
			}
			b.SetParallelism(4) // 8 callers on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := <-runs
				for pb.Next() {
					if _, err := h.invoke(r, "echo", `{"a":1}`, ""); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
