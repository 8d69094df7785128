package metrics

import (
	"strings"
	"testing"
)

func TestTextFormat(t *testing.T) {
	r := New()
	c := r.Counter("runs_finished_total", "Runs by final status.", "status")
	c.Add("DONE", 2)
	c.Add("FAILED", 1)
	r.GaugeFunc("ws_connections", "Open connections.", func() float64 { return 3 })
	h := r.Histogram("run_duration_seconds", "Run duration.", "status", []float64{0.1, 1})
	h.Observe("DONE", 0.05)
	h.Observe("DONE", 0.5)
	h.Observe("DONE", 5)
	var b strings.Builder
	r.WriteText(&b)
	for _, want := range []string{
		"# TYPE runs_finished_total counter", `runs_finished_total{status="DONE"} 2`, `runs_finished_total{status="FAILED"} 1`,
		"ws_connections 3", `run_duration_seconds_bucket{status="DONE",le="0.1"} 1`, `run_duration_seconds_bucket{status="DONE",le="1"} 2`,
		`run_duration_seconds_bucket{status="DONE",le="+Inf"} 3`, `run_duration_seconds_count{status="DONE"} 3`, `run_duration_seconds_sum{status="DONE"} 5.55`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
