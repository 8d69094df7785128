package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape writes the registry as text and parses it back with Prometheus's
// own parser: what a scraper would read.
func scrape(t *testing.T, r *Registry) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, b.String())
	}
	return b.String(), mfs
}

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
	v := r.CounterVec("tokens_total", "Tokens with \\ and\nnewline in help.", "agent", "model")
	v.Add(10, "a", `m"1\`)
	v.Add(0.5, "a", "m\n2")
	text, mfs := scrape(t, r)
	for _, want := range []string{
		"# TYPE runs_finished_total counter", `runs_finished_total{status="DONE"} 2`, `runs_finished_total{status="FAILED"} 1`,
		"ws_connections 3", `run_duration_seconds_bucket{status="DONE",le="0.1"} 1`, `run_duration_seconds_bucket{status="DONE",le="1"} 2`,
		`run_duration_seconds_bucket{status="DONE",le="+Inf"} 3`, `run_duration_seconds_count{status="DONE"} 3`, `run_duration_seconds_sum{status="DONE"} 5.55`,
		`# HELP tokens_total Tokens with \\ and\nnewline in help.`, `tokens_total{agent="a",model="m\"1\\"} 10`, `tokens_total{agent="a",model="m\n2"} 0.5`,
		"# TYPE process_resident_memory_bytes gauge", "# TYPE go_goroutines gauge",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if got := mfs["tokens_total"].GetMetric(); len(got) != 2 {
		t.Fatalf("tokens_total series %v", got)
	}
	for _, m := range mfs["tokens_total"].GetMetric() {
		if lv := m.GetLabel()[1].GetValue(); lv != `m"1\` && lv != "m\n2" {
			t.Errorf("label value read back as %q", lv)
		}
	}
}

func TestSameNameReturnsTheSameMetric(t *testing.T) {
	r := New()
	a := r.CounterVec("x_total", "X.", "agent")
	b := r.CounterVec("x_total", "X.", "agent")
	a.Inc("p")
	b.Inc("p")
	_, mfs := scrape(t, r)
	if got := mfs["x_total"].GetMetric()[0].GetCounter().GetValue(); got != 2 {
		t.Fatalf("x_total = %v, want 2 (one metric)", got)
	}
	r.GaugeFunc("g", "G.", func() float64 { return 1 })
	r.GaugeFunc("g", "G.", func() float64 { return 2 }) // ignored
	defer func() {
		if recover() == nil {
			t.Fatal("asking for x_total with other labels did not panic")
		}
	}()
	r.CounterVec("x_total", "X.", "tool")
}

func TestCardinalityIsBounded(t *testing.T) {
	r := New()
	v := r.CounterVec("calls_total", "Calls.", "model")
	for i := range MaxSeries + 50 {
		v.Inc(fmt.Sprintf("m%d", i))
	}
	v.Inc("m0") // an old value keeps its own series
	_, mfs := scrape(t, r)
	series := mfs["calls_total"].GetMetric()
	if len(series) != MaxSeries+1 {
		t.Fatalf("%d series, want %d + the overflow one", len(series), MaxSeries)
	}
	for _, m := range series {
		switch m.GetLabel()[0].GetValue() {
		case Overflow:
			if m.GetCounter().GetValue() != 50 {
				t.Errorf("overflow counted %v, want 50", m.GetCounter().GetValue())
			}
		case "m0":
			if m.GetCounter().GetValue() != 2 {
				t.Errorf("m0 counted %v, want 2", m.GetCounter().GetValue())
			}
		}
	}
}

func TestHandlerServesTheExposition(t *testing.T) {
	r := New()
	r.Counter("hits_total", "Hits.", "").Add("", 3)
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") || !strings.Contains(string(body), "hits_total 3") {
		t.Fatalf("%d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), body)
	}
}

// Recording into a series already seen allocates nothing, and each label
// combination — values that would join alike included — keeps its own
// series, of counters and histograms alike.
func TestRecordingASeenSeries(t *testing.T) {
	r := New()
	c := r.CounterVec("tokens_total", "Tokens.", "agent_id", "model", "kind")
	h := r.HistogramVec("latency_seconds", "Latency.", LatencyBuckets, "model")
	agent, model, kind := "weather", "gpt-4o-mini", "prompt"
	c.Add(1, agent, model, kind)
	h.Observe(0.01, model)
	if n := testing.AllocsPerRun(200, func() {
		c.Add(2, agent, model, kind)
		h.Observe(0.02, model)
	}); n != 0 {
		t.Errorf("a recording allocates %v times", n)
	}
	c.Add(5, "a", "bc", "d")
	c.Add(7, "ab", "c", "d")
	_, mfs := scrape(t, r)
	got := map[string]float64{}
	for _, m := range mfs["tokens_total"].GetMetric() {
		var key []string
		for _, l := range m.GetLabel() {
			key = append(key, l.GetValue())
		}
		got[strings.Join(key, "/")] = m.GetCounter().GetValue()
	}
	// Labels come sorted by name (agent_id, kind, model); AllocsPerRun
	// runs its function once more than asked, to warm up.
	want := map[string]float64{"weather/prompt/gpt-4o-mini": 403, "a/d/bc": 5, "ab/d/c": 7}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	if n := mfs["latency_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); n != 202 {
		t.Errorf("histogram counted %d observations, want 202", n)
	}
}

// GET /metrics answers OpenMetrics to a scraper that asks for it (API.md:
// "text, or OpenMetrics when asked"), and a family without labels is there
// before its first use.
func TestHandlerNegotiatesOpenMetrics(t *testing.T) {
	r := New()
	r.HistogramVec("test_latency_seconds", "Latency.", []float64{0.1, 1})
	r.CounterVec("test_things_total", "Things.")
	for accept, want := range map[string]string{
		"application/openmetrics-text;version=1.0.0": "# EOF",
		"": "test_latency_seconds_count 0",
	} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		rec := httptest.NewRecorder()
		r.Handler().ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		if !strings.Contains(string(body), want) || !strings.Contains(string(body), "test_things_total 0") {
			t.Errorf("Accept %q: Content-Type %s, want %q and test_things_total 0 in\n%s", accept, rec.Header().Get("Content-Type"), want, body)
		}
	}
}
