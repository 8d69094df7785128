package toolsvc

import (
	"testing"

	"github.com/agentplane/agentplane/internal/tool"
)

// BenchmarkInvokeServerTool is one allowed server tool call, invoke to
// succeeded, in one live run, on each store: the tool service, the event
// log and the store of the real binary, without its HTTP front (a
// micro-benchmark; the product's figure is bench/tools, on the binary).
func BenchmarkInvokeServerTool(b *testing.B) {
	for _, d := range []string{"sqlite", "postgres"} {
		b.Run(d, func(b *testing.B) {
			h := newHarness(b, d)
			go func() { // the harness reports each request it serves
				for range h.received {
				}
			}()
			h.put(tool.Definition{Name: "echo", Policy: tool.Policy{Decision: tool.DecisionAllow}})
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
