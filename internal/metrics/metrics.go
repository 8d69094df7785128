// Package metrics keeps the platform's counters and histograms and writes
// them in the Prometheus text format. It is deliberately tiny: a few
// labelled counters, gauges read at scrape time, and fixed-bucket
// histograms — enough for seed 001 §2.5's run/tool success rates and p95s.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds every metric of a process.
type Registry struct {
	mu      sync.Mutex
	metrics map[string]metric
}

type metric interface {
	write(w io.Writer, name string)
	help() (string, string) // help text, type
}

// New makes an empty registry.
func New() *Registry { return &Registry{metrics: map[string]metric{}} }

// Counter is a monotonically increasing count per label value.
type Counter struct {
	text, label string
	mu          sync.Mutex
	vals        map[string]*atomic.Int64
}

// Counter registers (or returns) a counter with at most one label.
func (r *Registry) Counter(name, help, label string) *Counter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.metrics[name].(*Counter); ok {
		return m
	}
	c := &Counter{text: help, label: label, vals: map[string]*atomic.Int64{}}
	r.metrics[name] = c
	return c
}

// Add adds n for a label value ("" when the counter has no label).
func (c *Counter) Add(labelValue string, n int64) {
	c.mu.Lock()
	v := c.vals[labelValue]
	if v == nil {
		v = &atomic.Int64{}
		c.vals[labelValue] = v
	}
	c.mu.Unlock()
	v.Add(n)
}

// Value reads a label value's count.
func (c *Counter) Value(labelValue string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.vals[labelValue]; v != nil {
		return v.Load()
	}
	return 0
}

func (c *Counter) help() (string, string) { return c.text, "counter" }

func (c *Counter) write(w io.Writer, name string) {
	c.mu.Lock()
	keys := make([]string, 0, len(c.vals))
	for k := range c.vals {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s%s %d\n", name, labels(c.label, k), c.Value(k))
	}
}

// Gauge is read at scrape time.
type Gauge struct {
	text, typ string
	fn        func() float64
}

// GaugeFunc registers a gauge whose value fn returns.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics[name] = &Gauge{text: help, typ: "gauge", fn: fn}
}

// CounterFunc registers a counter kept elsewhere and read at scrape time.
func (r *Registry) CounterFunc(name, help string, fn func() float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics[name] = &Gauge{text: help, typ: "counter", fn: fn}
}

func (g *Gauge) help() (string, string) { return g.text, g.typ }
func (g *Gauge) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %s\n", name, formatFloat(g.fn()))
}

// Histogram counts observations into fixed buckets, per label value.
type Histogram struct {
	text, label string
	bounds      []float64
	mu          sync.Mutex
	series      map[string]*series
}

type series struct {
	counts []int64 // per bucket, plus +Inf
	sum    float64
	n      int64
}

// Histogram registers a histogram with upper bounds (ascending).
func (r *Registry) Histogram(name, help, label string, bounds []float64) *Histogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.metrics[name].(*Histogram); ok {
		return m
	}
	h := &Histogram{text: help, label: label, bounds: bounds, series: map[string]*series{}}
	r.metrics[name] = h
	return h
}

// Observe records v under a label value.
func (h *Histogram) Observe(labelValue string, v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.series[labelValue]
	if s == nil {
		s = &series{counts: make([]int64, len(h.bounds)+1)}
		h.series[labelValue] = s
	}
	i := sort.SearchFloat64s(h.bounds, v)
	s.counts[i]++
	s.sum += v
	s.n++
}

func (h *Histogram) help() (string, string) { return h.text, "histogram" }

func (h *Histogram) write(w io.Writer, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.series))
	for k := range h.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := h.series[k]
		var cum int64
		for i, b := range h.bounds {
			cum += s.counts[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", name, labels(h.label, k, "le", formatFloat(b)), cum)
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", name, labels(h.label, k, "le", "+Inf"), s.n)
		fmt.Fprintf(w, "%s_sum%s %s\n", name, labels(h.label, k), formatFloat(s.sum))
		fmt.Fprintf(w, "%s_count%s %d\n", name, labels(h.label, k), s.n)
	}
}

// WriteText writes every metric in the Prometheus text format.
func (r *Registry) WriteText(w io.Writer) {
	r.mu.Lock()
	names := make([]string, 0, len(r.metrics))
	for n := range r.metrics {
		names = append(names, n)
	}
	r.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		r.mu.Lock()
		m := r.metrics[n]
		r.mu.Unlock()
		text, typ := m.help()
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", n, text, n, typ)
		m.write(w, n)
	}
}

// labels renders {k="v",…}, skipping pairs with an empty key.
func labels(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "" {
			continue
		}
		v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(kv[i+1])
		parts = append(parts, kv[i]+`="`+v+`"`)
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.6f", f), "0"), ".")
}

// DurationBuckets are seconds from 5 ms to 10 min.
var DurationBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
