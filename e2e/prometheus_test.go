package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outboxd/daemon"
	"github.com/outboxd/outboxd/testenv/kafkafault"
)

// A real Prometheus scrapes outboxd's admin endpoint, and every query of the shipped Grafana
// dashboard returns data: the metric names, labels and PromQL of configs/grafana/outboxd.json
// match what outboxd serves. The shipped alert rules load and evaluate without error, and the
// dead-letter alert fires for the row that was dead-lettered.
func TestPrometheusDashboardQueries(t *testing.T) {
	promBin := requirePrometheus(t)
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "order.created", "outbox.dead_letter")
	// One refused produce, retryable, so the retry and failure series exist.
	failProduceOnce(kc, "order.created", 19) // NOT_ENOUGH_REPLICAS

	adminAddr := freeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.Routes = "  - match: {topic: \"order.*\"}\n    sink: main\n    topic: \"{topic}\"\n"
	// An unroutable row is dead-lettered rather than stopping the run, so the reason series
	// of outboxd_dead_letters_total exists.
	o.OnPoison = "dead_letter"
	o.DeadLetter = "{sink: main, topic: outbox.dead_letter}"
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", adminAddr)
	r := startRelay(t, o, daemon.Options{})
	waitHTTP(t, "http://"+adminAddr+"/metrics", 30*time.Second, r)

	alerts, err := filepath.Abs(filepath.Join("..", "configs", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, promBin, adminAddr, alerts)
	prom.waitFor(t, `up{job="`+promJob+`"} == 1`, 30*time.Second)

	// Traffic after the first scrape, spread over a few seconds, so the rates are not zero.
	oc := newConsumer(t, kc, "order.created")
	dl := newConsumer(t, kc, "outbox.dead_letter")
	const n = 30
	for i := range n {
		w.commit(row{EventID: fmt.Sprintf("ev%d", i), Key: fmt.Sprintf("k%d", i%5), Topic: "order.created",
			Payload: []byte(`{"n":1}`)})
		if i == n/2 {
			w.commit(row{EventID: "unroutable", Key: "k", Topic: "inventory.changed", Payload: []byte(`{}`)})
		}
		time.Sleep(100 * time.Millisecond)
	}
	oc.waitFor(n, 30*time.Second)
	dl.waitForEvent("unroutable", 30*time.Second)

	vars := map[string]string{
		"job":             promJob,
		"instance":        adminAddr, // a regex that matches itself
		"datasource":      "prometheus",
		"__rate_interval": "1m",
		"__interval":      "1s",
		"__range":         "5m",
	}
	d := readDashboard(t)

	// The template variables' label_values queries find this outboxd.
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		sel, label, ok := parseLabelValues(v.Definition)
		if !ok {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		sel, err := substitute(sel, vars)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		if got := prom.labelValues(t, sel, label, 20*time.Second); !slices.Contains(got, vars[v.Name]) {
			t.Errorf("variable %s: label_values(%s, %s) = %v, want it to hold %q", v.Name, sel, label, got, vars[v.Name])
		}
	}

	// Every panel query returns at least one series. They are polled together for up to 45 s,
	// since some gauges are sampled on their own schedule (transactions_behind every 5 s).
	type query struct{ panel, expr string }
	var pending []query
	for _, q := range d.exprs() {
		expr, err := substitute(q[1], vars)
		if err != nil {
			t.Errorf("panel %q: %v", q[0], err)
			continue
		}
		pending = append(pending, query{q[0], expr})
	}
	if len(pending) < 20 {
		t.Fatalf("found %d dashboard queries; expected the ~27 of configs/grafana/outboxd.json", len(pending))
	}
	results := map[string]string{}
	deadline := time.Now().Add(45 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []query
		for _, q := range pending {
			res, err := prom.query(q.expr)
			if err != nil {
				t.Fatalf("panel %q: %s: %v", q.panel, q.expr, err)
			}
			if len(res) == 0 {
				still = append(still, q)
				continue
			}
			results[q.expr] = res.String()
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	for _, q := range pending {
		t.Errorf("panel %q: no data within 45s from %s", q.panel, q.expr)
	}
	exprs := make([]string, 0, len(results))
	for e := range results {
		exprs = append(exprs, e)
	}
	sort.Strings(exprs)
	for _, e := range exprs {
		t.Logf("%s => %s", e, results[e])
	}

	// Data, not just series: the throughput query of route 0 saw the sends.
	thr, err := prom.query(`sum(increase(outboxd_events_delivered_total{job="` + promJob + `", route="0", sink="main"}[5m]))`)
	if err != nil || len(thr) == 0 || thr[0].value() < 1 {
		t.Errorf("delivered on route 0 in the last 5m: %v (%v), want > 0", thr, err)
	}

	// The shipped rules load and evaluate, and the dead letter fired its alert (no `for`), under
	// a job name the rules do not know.
	rulesText, err := os.ReadFile(alerts)
	if err != nil {
		t.Fatal(err)
	}
	prom.waitRulesHealthy(t, strings.Count(string(rulesText), "- alert:"), 30*time.Second)
	prom.waitFor(t, `ALERTS{alertname="OutboxdDeadLettersGrowing", alertstate="firing", reason="no_route", job="`+promJob+`"}`, 30*time.Second)
	if out := prom.output(); t.Failed() && out != "" {
		t.Logf("prometheus output:\n%s", out)
	}
}

// requirePrometheus returns the prometheus binary's path. It fails the test in CI (env CI set)
// when the binary is missing and skips it otherwise.
func requirePrometheus(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err == nil {
		return p
	}
	const howto = "prometheus not found: install Debian's prometheus package (scripts/install-deps.sh, or apt-get install prometheus)"
	if os.Getenv("CI") != "" {
		t.Fatal(howto)
	}
	t.Skip(howto)
	return ""
}

// failProduceOnce answers the next produce request for topic with a partition error code.
func failProduceOnce(c *kfake.Cluster, topic string, code int16) {
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		found := false
		for _, rt := range req.Topics {
			found = found || rt.Topic == topic
		}
		if !found {
			return nil, nil, false // not handled: the control stays for the next request
		}
		return kafkafault.ProduceError(req, code), nil, true
	})
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHTTP waits until url answers 200, failing early if the relay stopped.
func waitHTTP(t *testing.T, u string, timeout time.Duration, r *relay) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-r.done:
			r.done <- err // for relay.stop
			t.Fatalf("outboxd stopped before serving %s: %v\n%s", u, err, r.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %s: %v", u, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promServer is a prometheus process scraping outboxd.
type promServer struct {
	base string
	out  *lockedWriter
}

// promJob is the job name startPrometheus scrapes outboxd under: not "outboxd", since the
// shipped alerts must work whatever the operator names the job.
const promJob = "relay-e2e"

// startPrometheus runs prometheus in a temp dir, scraping target (job promJob) every second and evaluating
// the rules file every second; it is stopped when the test ends.
func startPrometheus(t *testing.T, bin, target, rules string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: %s
    static_configs: [{targets: [%q]}]
`, rules, promJob, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
		"--log.level=warn")
	p := &promServer{base: "http://" + listen, out: &lockedWriter{w: &bytes.Buffer{}}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	var once sync.Once
	go func() { _ = cmd.Wait(); once.Do(func() { close(done) }) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited at start:\n%s", p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s:\n%s", p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *promServer) output() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.out.w.String()
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value() float64 {
	str, _ := s.Value[1].(string)
	var f float64
	fmt.Sscan(str, &f)
	return f
}

type promVector []promSample

func (v promVector) String() string {
	parts := make([]string, len(v))
	for i, s := range v {
		labels := make([]string, 0, len(s.Metric))
		for k, val := range s.Metric {
			if k != "job" && k != "instance" {
				labels = append(labels, k+"="+val)
			}
		}
		sort.Strings(labels)
		parts[i] = fmt.Sprintf("{%s} %v", strings.Join(labels, ","), s.Value[1])
	}
	return strings.Join(parts, "; ")
}

// apiGet calls a Prometheus HTTP API endpoint and decodes its data field into v.
func (p *promServer) apiGet(path string, params url.Values, v any) error {
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// query evaluates expr now; an error is a bad query or an unreachable Prometheus.
func (p *promServer) query(expr string) (promVector, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.apiGet("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", data.ResultType)
	}
	var v promVector
	return v, json.Unmarshal(data.Result, &v)
}

// waitFor polls until expr returns a series.
func (p *promServer) waitFor(t *testing.T, expr string, timeout time.Duration) promVector {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, err := p.query(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if len(v) > 0 {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s returned nothing within %s; prometheus output:\n%s", expr, timeout, p.output())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// labelValues polls until series matching sel exist, and returns their values of label.
func (p *promServer) labelValues(t *testing.T, sel, label string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var series []map[string]string
		if err := p.apiGet("/api/v1/series", url.Values{"match[]": {sel}}, &series); err != nil {
			t.Fatalf("series %s: %v", sel, err)
		}
		var out []string
		for _, s := range series {
			if v, ok := s[label]; ok && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitRulesHealthy waits until n rules were evaluated, all without error.
func (p *promServer) waitRulesHealthy(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.apiGet("/api/v1/rules", nil, &data); err != nil {
			t.Fatal(err)
		}
		var bad []string
		count := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				count++
				if r.Health != "ok" {
					bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		if count == n && len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rules: %d loaded (want %d), not healthy: %v", count, n, bad)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// grafanaDashboard is the part of a Grafana dashboard JSON the test reads.
type grafanaDashboard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's panels
}

func readDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "configs", "grafana", "outboxd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("configs/grafana/outboxd.json: %v", err)
	}
	return d
}

// exprs lists every panel query as {panel title, expr}, rows' nested panels included.
func (d grafanaDashboard) exprs() [][2]string {
	var out [][2]string
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, [2]string{p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// substitute replaces Grafana variables ($name, ${name}, ${name:fmt}) with vars; an unknown
// variable is an error.
func substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVar.FindStringSubmatch(m)
		name := sm[1] + sm[2]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%q uses unknown variables %v", expr, missing)
	}
	return out, nil
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*$`)

// parseLabelValues splits a Grafana label_values(selector, label) query.
func parseLabelValues(q string) (sel, label string, ok bool) {
	m := labelValuesRE.FindStringSubmatch(q)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}
