package main

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outboxd/outboxd/metrics"
)

// metricDoc is one metric family as the reference lists it.
type metricDoc struct {
	Name, Type, Help string
	// Labels are the variable labels; ConstLabels those fixed per process (lock_name with ha).
	Labels, ConstLabels []string
	// Buckets are a histogram's upper bounds, without +Inf.
	Buckets []float64
}

// descText parses prometheus.Desc's String, the only way its name, help and labels are exposed.
var descText = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// constLabelName takes the names out of constLabels' name="value" list.
var constLabelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// metricDocs returns every outboxd_* metric of a registry built by metrics.New: names, help and
// labels from the registry's descriptors (which list labelled families before any series
// exists), and types from Gather, after creating one series of each labelled family.
func metricDocs() ([]metricDoc, error) {
	// A lock name makes outboxd_leader carry its constant label, as with ha.
	m := metrics.New(metrics.Options{Version: "dev", LockName: "outboxd.example"})
	materialize(m)
	reg := m.Registry()
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	var docs []metricDoc
	for d := range ch {
		mm := descText.FindStringSubmatch(d.String())
		if mm == nil {
			return nil, fmt.Errorf("cannot read descriptor %s", d)
		}
		name, err1 := strconv.Unquote(mm[1])
		help, err2 := strconv.Unquote(mm[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("cannot read descriptor %s", d)
		}
		if !strings.HasPrefix(name, "outboxd_") {
			continue // the Go runtime's and the process's collectors
		}
		md := metricDoc{Name: name, Help: help}
		for _, c := range constLabelName.FindAllStringSubmatch(mm[3], -1) {
			md.ConstLabels = append(md.ConstLabels, c[1])
		}
		if mm[4] != "" {
			md.Labels = strings.Split(mm[4], ",")
		}
		docs = append(docs, md)
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for i := range docs {
		f, ok := byName[docs[i].Name]
		if !ok || len(f.GetMetric()) == 0 {
			return nil, fmt.Errorf("metric %s has no series yet, so its type is unknown: create one in internal/docgen's materialize", docs[i].Name)
		}
		docs[i].Type = strings.ToLower(dto.MetricType_name[int32(f.GetType())])
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			docs[i].Buckets = append(docs[i].Buckets, b.GetUpperBound())
		}
	}
	slices.SortFunc(docs, func(a, b metricDoc) int { return strings.Compare(a.Name, b.Name) })
	return docs, nil
}

// materialize creates one series of every labelled family, so that Gather reports its type.
func materialize(m *metrics.Metrics) {
	m.DeclareSink("main", []string{"0", metrics.RouteDeadLetter})
	m.DeclareTable("shop.outbox_event", []string{"0", metrics.RouteDeadLetter})
	m.DeclareCleanupTable("shop.outbox_event")
	m.SetCleanupOldest("shop.outbox_event", 0)
	m.SetCleanupUnproven("shop.outbox_event", 0)
	m.SetCleanupStopped("read_only")
	m.TopicMissing("main", "orders", true)
	m.SinkResult("main", nil)
	m.ReconcileFailedRun()
	m.DeclareKafkaTxn("main")
}

func renderMetrics(docs []metricDoc) []byte {
	var b bytes.Buffer
	b.WriteString(generatedHeader)
	b.WriteString(`# Metrics reference

Every metric outboxd serves at ` + "`/metrics`" + ` on ` + "`admin.listen`" + ` (default 127.0.0.1:9120), generated
from its metrics registry. Besides these, the Prometheus Go client's ` + "`go_*`" + ` runtime metrics
and, on Linux, its ` + "`process_*`" + ` metrics are served. All use base units (seconds, bytes).

Label values come from the configuration and the code, so there are few of them: sink names,
outbox tables (` + "`schema.table`" + `), route labels and fixed reasons; only ` + "`outboxd_topic_missing`" + `
names a destination topic, and only while messages wait for it. A route's label is its ` + "`name`" + `
when it has one, else its index in ` + "`routes`" + ` (` + "`\"0\"`" + `, ` + "`\"1\"`" + `, …); dead letters carry the route
label ` + "`dead_letter`" + `. Counters start at 0 for every label value the configuration implies (each
sink, route and outbox table, each dead-letter reason), so ` + "`rate()`" + ` and ` + "`increase()`" + ` see
their first increment. Histogram buckets are round (the 1-2.5-5 steps of Prometheus' defaults),
so a threshold such as 100 ms or 1 s is a bucket bound.

| Metric | Type | Labels | Description |
|---|---|---|---|
`)
	for _, d := range docs {
		labels := make([]string, 0, len(d.Labels)+len(d.ConstLabels))
		for _, l := range d.Labels {
			labels = append(labels, "`"+l+"`")
		}
		for _, l := range d.ConstLabels {
			labels = append(labels, "`"+l+"` (fixed per process)")
		}
		help := d.Help
		if len(d.Buckets) > 0 {
			bounds := make([]string, len(d.Buckets))
			for i, v := range d.Buckets {
				bounds[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
			help += " Buckets (seconds): " + strings.Join(bounds, ", ") + "."
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Name, d.Type, strings.Join(labels, ", "), cell(help))
	}
	return b.Bytes()
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
