// Package metrics is the process's Prometheus registry (DESIGN §14). It is
// a thin layer over github.com/prometheus/client_golang, which writes the
// exposition (text and OpenMetrics, HELP/TYPE, escaping, histogram
// buckets) and adds the Go runtime and process collectors; this package
// keeps the call sites a line each and bounds label cardinality.
//
// Label values must come from bounded sets: agent ids and tool names (the
// registries bound them), states, error codes, models. Never run, session
// or call ids. As a backstop every vector keeps at most MaxSeries label
// combinations; further ones are counted under the value "_other".
package metrics

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// MaxSeries bounds the label combinations of one metric.
const MaxSeries = 2000

// Overflow is the label value series beyond MaxSeries are counted under.
const Overflow = "_other"

// Registry holds every metric of a process. Registering a name twice
// returns the first metric (so packages sharing a registry may each ask
// for one they both record); asking for it with other labels or of another
// kind is a programming error and panics.
type Registry struct {
	reg *prometheus.Registry

	mu    sync.Mutex
	byKey map[string]any // name -> *CounterVec | *HistogramVec | gaugeFunc marker
	spec  map[string]string
}

// New makes a registry with the Go runtime and process collectors
// (go_*, process_resident_memory_bytes, …) already in it.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), byKey: map[string]any{}, spec: map[string]string{}}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves the registry for a scraper (content negotiation included).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// WriteText writes every metric in the Prometheus text format.
func (r *Registry) WriteText(w io.Writer) error {
	mfs, err := r.reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}

// lookup returns the metric registered as name, checking it was asked for
// the same way (spec); nil when new.
func (r *Registry) lookup(name, spec string) any {
	if m, ok := r.byKey[name]; ok {
		if r.spec[name] != spec {
			panic(fmt.Sprintf("metrics: %s registered as %s, asked for as %s", name, r.spec[name], spec))
		}
		return m
	}
	return nil
}

func (r *Registry) add(name, spec string, m any, c prometheus.Collector) {
	r.reg.MustRegister(c)
	r.byKey[name] = m
	r.spec[name] = spec
}

// series holds the metric of each label combination recorded so far, at
// most MaxSeries of them; further combinations get the series whose every
// label is Overflow. A recording looks its series up once, under a read
// lock and without an allocation (the key is built on the stack), where
// asking the vector each time cost a joined key and a second hashed lookup
// (issue 13: the LLM proxy records five series per call).
type series[M any] struct {
	with func(...string) M // the vector's WithLabelValues

	mu sync.RWMutex
	m  map[string]M
}

func (s *series[M]) get(vals []string) M {
	var buf [192]byte
	key := buf[:0]
	for i, v := range vals {
		if i > 0 {
			key = append(key, 0xff)
		}
		key = append(key, v...)
	}
	s.mu.RLock()
	m, ok := s.m[string(key)]
	s.mu.RUnlock()
	if ok {
		return m
	}
	return s.add(string(key), vals)
}

// add makes the series of a new combination (or hands out the overflow's).
func (s *series[M]) add(key string, vals []string) M {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.m[key]; ok {
		return m
	}
	if len(s.m) >= MaxSeries {
		over := make([]string, len(vals))
		for i := range over {
			over[i] = Overflow
		}
		return s.with(over...)
	}
	if s.m == nil {
		s.m = map[string]M{}
	}
	m := s.with(slices.Clone(vals)...)
	s.m[key] = m
	return m
}

// CounterVec is a counter per combination of label values.
type CounterVec struct {
	vec    *prometheus.CounterVec
	series series[prometheus.Counter]
}

// CounterVec registers (or returns) a counter with the given labels.
func (r *Registry) CounterVec(name, help string, labels ...string) *CounterVec {
	r.mu.Lock()
	defer r.mu.Unlock()
	spec := "counter" + fmt.Sprint(labels)
	if m := r.lookup(name, spec); m != nil {
		return m.(*CounterVec)
	}
	c := &CounterVec{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)}
	c.series.with = c.vec.WithLabelValues
	r.add(name, spec, c, c.vec)
	if len(labels) == 0 {
		c.series.get(nil) // exported (at 0) before its first use
	}
	return c
}

// Add adds v (≥ 0) to the series of the label values, in label order.
func (c *CounterVec) Add(v float64, labelValues ...string) {
	c.series.get(labelValues).Add(v)
}

// Inc adds one.
func (c *CounterVec) Inc(labelValues ...string) { c.Add(1, labelValues...) }

// HistogramVec is a histogram per combination of label values.
type HistogramVec struct {
	vec    *prometheus.HistogramVec
	series series[prometheus.Observer]
}

// HistogramVec registers (or returns) a histogram with upper bounds
// (ascending) and the given labels.
func (r *Registry) HistogramVec(name, help string, bounds []float64, labels ...string) *HistogramVec {
	r.mu.Lock()
	defer r.mu.Unlock()
	spec := "histogram" + fmt.Sprint(labels) + fmt.Sprint(bounds)
	if m := r.lookup(name, spec); m != nil {
		return m.(*HistogramVec)
	}
	h := &HistogramVec{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: bounds}, labels)}
	h.series.with = h.vec.WithLabelValues
	r.add(name, spec, h, h.vec)
	if len(labels) == 0 {
		h.series.get(nil) // exported (empty) before its first use
	}
	return h
}

// Observe records v under the label values, in label order.
func (h *HistogramVec) Observe(v float64, labelValues ...string) {
	h.series.get(labelValues).Observe(v)
}

// Counter is a counter with at most one label, counted in whole numbers.
type Counter struct {
	vec   *CounterVec
	label bool
}

// Counter registers (or returns) a counter with at most one label ("" for
// none).
func (r *Registry) Counter(name, help, label string) *Counter {
	if label == "" {
		return &Counter{vec: r.CounterVec(name, help)}
	}
	return &Counter{vec: r.CounterVec(name, help, label), label: true}
}

// Add adds n for a label value ("" when the counter has no label).
func (c *Counter) Add(labelValue string, n int64) {
	if c.label {
		c.vec.Add(float64(n), labelValue)
		return
	}
	c.vec.Add(float64(n))
}

// Histogram is a histogram with at most one label.
type Histogram struct {
	vec   *HistogramVec
	label bool
}

// Histogram registers (or returns) a histogram with upper bounds
// (ascending) and at most one label ("" for none).
func (r *Registry) Histogram(name, help, label string, bounds []float64) *Histogram {
	if label == "" {
		return &Histogram{vec: r.HistogramVec(name, help, bounds)}
	}
	return &Histogram{vec: r.HistogramVec(name, help, bounds, label), label: true}
}

// Observe records v under a label value ("" when the histogram has none).
func (h *Histogram) Observe(labelValue string, v float64) {
	if h.label {
		h.vec.Observe(v, labelValue)
		return
	}
	h.vec.Observe(v)
}

// GaugeFunc registers a gauge whose value fn returns at scrape time. A
// second registration of name is ignored (the first fn stays).
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.valueFunc(name, help, prometheus.GaugeValue, fn)
}

// CounterFunc registers a counter kept elsewhere and read at scrape time.
func (r *Registry) CounterFunc(name, help string, fn func() float64) {
	r.valueFunc(name, help, prometheus.CounterValue, fn)
}

func (r *Registry) valueFunc(name, help string, typ prometheus.ValueType, fn func() float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	spec := fmt.Sprint("func", typ)
	if r.lookup(name, spec) != nil {
		return
	}
	var c prometheus.Collector
	if typ == prometheus.GaugeValue {
		c = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn)
	} else {
		c = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn)
	}
	r.add(name, spec, struct{}{}, c)
}

// DurationBuckets are seconds from 5 ms to 10 min.
var DurationBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// LatencyBuckets are seconds from 100 µs to 10 s, for steps that should
// be fast (a commit, the proxy's own work, a first token).
var LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
