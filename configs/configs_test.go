// Package configs_test checks the shipped monitoring configs: the Prometheus config and alert
// rules with promtool (the alerts' own unit tests in prometheus/alerts_test.yml), and the
// Grafana dashboard's structure. e2e/prometheus_test.go runs every dashboard query against a
// real Prometheus scraping outboxd.
package configs_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/internal/doccheck"
)

// requirePromtool returns promtool's path. It fails the test in CI (env CI set) when promtool
// is missing and skips it otherwise.
func requirePromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	const howto = "promtool not found: install Debian's prometheus package (scripts/install-deps.sh, or apt-get install prometheus)"
	if os.Getenv("CI") != "" {
		t.Fatal(howto)
	}
	t.Skip(howto)
	return ""
}

func TestPromtool(t *testing.T) {
	promtool := requirePromtool(t)
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yml"},
		{"test", "rules", "prometheus/alerts_test.yml"},
		// The target outboxd:9120 is the compose service; check config does not resolve it.
		{"check", "config", "prometheus/prometheus.yml"},
	} {
		t.Run(strings.Join(args[:2], "_"), func(t *testing.T) {
			out, err := exec.Command(promtool, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

// runbookBase is where every alert's runbook_url points: a section of the runbook page.
const runbookBase = "https://github.com/outboxd/outboxd/blob/main/docs/operations/runbook.md#"

// jobMatcher finds a label matcher on job in PromQL: job="x", job=~"x", job!="x".
var jobMatcher = regexp.MustCompile(`\bjob\s*(=|!=|=~|!~)`)

// Every alert works under any job name (no expression selects a job, and no unit test feeds
// series under the compose stack's job="outboxd"), and its runbook_url names a heading of
// docs/operations/runbook.md that exists.
func TestAlertRules(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/alerts.yml", &rules)
	runbook, err := os.ReadFile(filepath.Join("..", "docs", "operations", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := doccheck.Anchors(string(runbook))
	tests, err := os.ReadFile(filepath.Join("prometheus", "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(tests), `job="outboxd",`) || strings.Contains(string(tests), "job: outboxd,") {
		t.Error(`alerts_test.yml has series under job="outboxd": test the rules under other job names`)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if jobMatcher.MatchString(r.Expr) {
				t.Errorf("alert %s selects a job (%q): match on outboxd's own metrics instead", r.Alert, r.Expr)
			}
			url := r.Annotations["runbook_url"]
			if want := runbookBase + strings.ToLower(r.Alert); url != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, url, want)
			} else if !slices.Contains(anchors, strings.ToLower(r.Alert)) {
				t.Errorf("alert %s: docs/operations/runbook.md has no heading %q for its runbook_url", r.Alert, r.Alert)
			}
			if !strings.Contains(string(runbook), "\n| "+r.Alert+" | ") {
				t.Errorf("alert %s is not in docs/operations/runbook.md's table of alerts", r.Alert)
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool unit test in alerts_test.yml", r.Alert)
			}
		}
	}
	if n < 10 {
		t.Errorf("alerts.yml has %d alerts, want at least 10", n)
	}
}

type dashboard struct {
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// varRef matches a Grafana variable reference: $name or ${name}.
var varRef = regexp.MustCompile(`\$\{?(\w+)\}?`)

// The dashboard loads in Grafana's provisioning (valid JSON, unique panel ids, every panel on
// the datasource variable the provisioned datasource fills) and its queries use only the
// variables it defines and Grafana's $__rate_interval.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("grafana", "outboxd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/outboxd.json: %v", err)
	}
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Fatalf("uid %q, schemaVersion %d: want a uid and schemaVersion >= 36", d.UID, d.SchemaVersion)
	}
	vars := map[string]bool{"__rate_interval": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, want := range []string{"datasource", "job", "instance"} {
		if !vars[want] {
			t.Errorf("template variable %q missing", want)
		}
	}
	ids := map[int]string{}
	exprs := 0
	var check func(ps []panel)
	check = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				check(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs++
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
				}
				for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
					if !vars[m[1]] {
						t.Errorf("panel %q: %q uses undefined variable $%s", p.Title, tg.Expr, m[1])
					}
				}
			}
		}
	}
	check(d.Panels)
	if exprs < 20 {
		t.Errorf("dashboard has %d queries; the panels listed in its description need more", exprs)
	}
}

// The provisioning files point where docker-compose mounts things: dashboards at
// /var/lib/grafana/dashboards, Prometheus at prometheus:9090 under the uid the dashboard's
// datasource variable defaults to.
func TestGrafanaProvisioning(t *testing.T) {
	var dash struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/outboxd.yml", &dash)
	if len(dash.Providers) != 1 || dash.Providers[0].Type != "file" || dash.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Errorf("dashboard providers %+v: want one file provider at /var/lib/grafana/dashboards", dash.Providers)
	}

	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != "prometheus" || ds.Datasources[0].Type != "prometheus" ||
		ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasources %+v: want prometheus uid prometheus at http://prometheus:9090", ds.Datasources)
	}
	raw, err := os.ReadFile(filepath.Join("grafana", "outboxd.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"value": "prometheus"`) {
		t.Error(`grafana/outboxd.json: the datasource variable does not default to uid "prometheus"`)
	}
}

// readYAML decodes file into v, failing the test on error.
func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := yaml.NewDecoder(f).Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
