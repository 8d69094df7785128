package e2e

// The metrics of DESIGN §14 after a scripted session: the demo agent's LLM
// calls and a transfer that waits for an approval, and a client tool that
// fails client_offline and so fails its run. The scrape is parsed with
// Prometheus's own text parser, and names, labels and values are checked.

import (
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeMetrics GETs /metrics with the admin key and parses it.
func scrapeMetrics(t *testing.T, s *server) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d %s", resp.StatusCode, raw)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, raw)
	}
	return mfs
}

// series finds the series of family name whose labels are exactly want.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	for _, m := range mfs[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

func describeFamily(mf *dto.MetricFamily) string {
	var lines []string
	for _, m := range mf.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		lines = append(lines, strings.Join(ls, ","))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestMetricsAfterAScriptedSession(t *testing.T) {
	s := startDemo(t)
	putTool(t, s, "ui.confirm", map[string]any{"kind": "client", "description": "Asks the user.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}})
	ga := startGoToolAgent(t, s, "go-tools")

	// The demo: LLM calls through the proxy, and demo.transfer waiting for
	// an approval given over HTTP.
	c := dial(t, s, "alice", "alice-key")
	c.send(map[string]any{"type": "agent_invoke", "request_id": "r", "agent_id": "demo", "message": map[string]any{"role": "user", "content": "Send 250 to Bob"}})
	ar := c.readUntilAll("approval_required", isType("approval_required"))
	if code, body := decide(s, sv(find(t, ar, "approval", isType("approval_required")), "approval_id"), "approve"); code != 200 {
		t.Fatalf("decide: %d %v", code, body)
	}
	if msgs := c.untilEnd(); msgs[len(msgs)-1]["type"] != "done" {
		t.Fatalf("the transfer run ended %v", msgs[len(msgs)-1])
	}

	// A client tool with no client connected: client_offline fails the run
	// (on_failure: fail_run by default).
	c.invokeSpec("go-tools", "", map[string]any{"tool": "ui.confirm", "args": map[string]any{"q": "anyone?"}, "hold": true})
	runID := ga.held(t)
	c.conn.Close()
	waitMetric(t, s, "agentplane_ws_connections", func(v float64) bool { return v == 0 })
	ga.releaseAll()
	if run := waitRunEnded(t, s, runID); run["status"] != "FAILED" || sv(obj(run, "error"), "code") != "client_offline" {
		t.Fatalf("the offline run: %v", run)
	}

	var mfs map[string]*dto.MetricFamily
	waitFor(t, "the runs' ends are counted", func() bool {
		mfs = scrapeMetrics(t, s)
		return series(mfs, "agentplane_runs_finished_total", map[string]string{"agent": "go-tools", "status": "FAILED", "code": "client_offline", "cause": "tool_call"}) != nil &&
			series(mfs, "agentplane_runs_finished_total", map[string]string{"agent": "demo", "status": "DONE", "code": "", "cause": "agent"}) != nil
	})
	counter := func(name string, labels map[string]string) float64 {
		t.Helper()
		m := series(mfs, name, labels)
		if m == nil {
			t.Fatalf("no %s%v; the family has:\n%s", name, labels, describeFamily(mfs[name]))
		}
		return m.GetCounter().GetValue()
	}
	histCount := func(name string, labels map[string]string) uint64 {
		t.Helper()
		m := series(mfs, name, labels)
		if m == nil {
			t.Fatalf("no %s%v; the family has:\n%s", name, labels, describeFamily(mfs[name]))
		}
		h := m.GetHistogram()
		if len(h.GetBucket()) == 0 || h.GetSampleSum() < 0 {
			t.Fatalf("%s%v is not a histogram: %v", name, labels, h)
		}
		return h.GetSampleCount()
	}
	demo := map[string]string{"agent": "demo", "model": "demo-llm"}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range base {
			out[a] = b
		}
		return out
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"runs started by the demo", counter("agentplane_runs_started_total", map[string]string{"agent": "demo"}) == 1},
		{"runs started by go-tools", counter("agentplane_runs_started_total", map[string]string{"agent": "go-tools"}) == 1},
		{"the demo's run done", counter("agentplane_runs_finished_total", map[string]string{"agent": "demo", "status": "DONE", "code": "", "cause": "agent"}) == 1},
		{"the run a tool call failed", counter("agentplane_runs_finished_total", map[string]string{"agent": "go-tools", "status": "FAILED", "code": "client_offline", "cause": "tool_call"}) == 1},
		{"run durations", histCount("agentplane_run_duration_seconds", map[string]string{"agent": "go-tools", "status": "FAILED"}) == 1},
		{"the approved transfer", counter("agentplane_tool_calls_total", map[string]string{"tool": "demo.transfer", "state": "SUCCEEDED", "code": ""}) == 1},
		{"the offline client tool", counter("agentplane_tool_calls_total", map[string]string{"tool": "ui.confirm", "state": "FAILED", "code": "client_offline"}) == 1},
		{"tool call durations", histCount("agentplane_tool_call_duration_seconds", map[string]string{"tool": "demo.transfer", "state": "SUCCEEDED"}) == 1},
		{"client_offline", counter("agentplane_client_offline_total", map[string]string{"tool": "ui.confirm"}) == 1},
		{"the approval's wait", histCount("agentplane_approval_wait_seconds", map[string]string{"tool": "demo.transfer", "outcome": "approved"}) == 1},
		{"LLM calls", counter("agentplane_llm_calls_total", with(demo, "outcome", "ok")) >= 2},
		{"prompt tokens", counter("agentplane_llm_tokens_total", with(demo, "kind", "prompt")) > 0},
		{"completion tokens", counter("agentplane_llm_tokens_total", with(demo, "kind", "completion")) > 0},
		{"LLM cost", counter("agentplane_llm_cost_total", demo) > 0},
		{"TTFT", histCount("agentplane_llm_ttft_seconds", map[string]string{"model": "demo-llm"}) >= 2},
		{"LLM latency", histCount("agentplane_llm_latency_seconds", map[string]string{"model": "demo-llm"}) >= 2},
		{"proxy overhead", histCount("agentplane_llm_proxy_overhead_seconds", map[string]string{}) >= 2},
		{"event commits", histCount("agentplane_event_commit_seconds", map[string]string{}) > 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: wrong value", c.what)
		}
	}
	for _, g := range []string{"agentplane_runs_active", "agentplane_ws_connections", "agentplane_tool_waits_pending", "agentplane_event_streams", "process_resident_memory_bytes"} {
		if mfs[g].GetType() != dto.MetricType_GAUGE || len(mfs[g].GetMetric()) != 1 {
			t.Errorf("gauge %s: %v", g, mfs[g])
		}
	}
	// Every family of ours says what it is, and no label holds an id.
	idLike := regexp.MustCompile(`^(run|ses|tc|apr|evt|msg|call)_`)
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "agentplane_") {
			continue
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if idLike.MatchString(l.GetValue()) {
					t.Errorf("%s has an id as a label value: %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}
