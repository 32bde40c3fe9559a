package dashboard

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestWriteFamilies: what /metrics writes parses with Prometheus' own
// text parser, with every value, label (quotes, backslashes, newlines in
// a session's policy name) and histogram series as given.
func TestWriteFamilies(t *testing.T) {
	g := &family{name: "warden_b", typ: "gauge", help: "a gauge\\ with a\nnewline"}
	g.add(2, "session", "s2", "policy", `we"ird\pol`+"\nicy")
	g.add(1.5, "session", "s1", "policy", "p")
	c := &family{name: "warden_a_total", typ: "counter", help: "a counter"}
	c.add(math.Inf(1), "outcome", "ok")
	h := &family{name: "warden_h_seconds", typ: "histogram", help: "a histogram", samples: []sample{
		{suffix: "_bucket", labels: []string{"le", formatFloat(0.002)}, value: 1},
		{suffix: "_bucket", labels: []string{"le", formatFloat(30)}, value: 3},
		{suffix: "_bucket", labels: []string{"le", "+Inf"}, value: 4},
		{suffix: "_sum", value: 61.5},
		{suffix: "_count", value: 4},
	}}
	empty := &family{name: "warden_empty", typ: "gauge", help: "no samples"}
	var buf bytes.Buffer
	writeFamilies(&buf, []*family{g, h, c, empty})
	text := buf.String()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v in:\n%s", err, text)
	}
	if _, ok := parsed["warden_empty"]; ok || strings.Index(text, "warden_a_total") > strings.Index(text, "warden_b") {
		t.Errorf("want families with samples only, sorted by name:\n%s", text)
	}
	gb := parsed["warden_b"]
	if gb.GetHelp() != "a gauge\\ with a\nnewline" || len(gb.GetMetric()) != 2 {
		t.Fatalf("warden_b: %v", gb)
	}
	m := gb.GetMetric()[1] // sorted by labels: s1 first
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["session"] != "s2" || labels["policy"] != `we"ird\pol`+"\nicy" || m.GetGauge().GetValue() != 2 {
		t.Errorf("warden_b's second sample: %v", m)
	}
	if v := parsed["warden_a_total"].GetMetric()[0].GetCounter().GetValue(); !math.IsInf(v, 1) {
		t.Errorf("warden_a_total = %v, want +Inf", v)
	}
	hist := parsed["warden_h_seconds"].GetMetric()[0].GetHistogram()
	if hist.GetSampleCount() != 4 || hist.GetSampleSum() != 61.5 || len(hist.GetBucket()) != 3 ||
		hist.GetBucket()[0].GetUpperBound() != 0.002 || hist.GetBucket()[1].GetCumulativeCount() != 3 {
		t.Errorf("warden_h_seconds: %v", hist)
	}
}
