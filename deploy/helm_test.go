package deploy_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/outboxd/outboxd/config"
)

// No cluster and no helm binary here: Helm's own Go packages lint the chart and render it as
// `helm lint` and `helm template` would, and the rendered objects are decoded strictly into the
// k8s.io/api types and checked like deploy/kubernetes.

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy", "helm", "outboxd") }

// haValues turn on the HA pair and the ServiceMonitor.
var haValues = map[string]any{
	"ha":             map[string]any{"enabled": true},
	"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}},
}

// helmRender is what the chart renders with the values over its defaults.
type helmRender struct {
	k8sManifests
	chart          *chart.Chart
	serviceMonitor map[string]any // nil when not rendered
}

func renderChart(t *testing.T, vals map[string]any) (helmRender, error) {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	// ToRenderValues also checks vals against values.schema.json, as helm install does.
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "orders", Namespace: "shop", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return helmRender{}, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return helmRender{}, err
	}
	r := helmRender{chart: ch}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range docSep.Split(files[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			if strings.Contains(doc, "\nkind: ServiceMonitor\n") {
				if err := yaml.Unmarshal([]byte(doc), &r.serviceMonitor); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				continue
			}
			obj, err := decodeManifest([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			r.files = append(r.files, name)
			switch o := obj.(type) {
			case *appsv1.Deployment:
				r.deployment = o
			case *corev1.ConfigMap:
				r.configMap = o
			case *corev1.Service:
				r.service = o
			case *policyv1.PodDisruptionBudget:
				r.pdb = o
			}
		}
	}
	if r.deployment == nil || r.configMap == nil || r.service == nil {
		t.Fatalf("rendered %v: want a Deployment, a ConfigMap and a Service", names)
	}
	return r, nil
}

func mustRender(t *testing.T, vals map[string]any) helmRender {
	t.Helper()
	r, err := renderChart(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// `helm lint` with the default values and with the HA ones: no warning, no error.
func TestHelmLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"default": nil, "ha": haValues} {
		l := lint.All(chartDir(t), vals, "shop", false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s values: %s", name, m)
			}
		}
	}
}

func TestHelmRender(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vals     map[string]any
		replicas int32
		ha       bool
	}{{"default", nil, 1, false}, {"ha+servicemonitor", haValues, 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.vals)
			d := r.deployment
			c := outboxdContainer(t, d)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, tc.replicas)
			}
			// Without the lock two pods must never overlap; with it a standby comes up first.
			wantStrategy := appsv1.RecreateDeploymentStrategyType
			if tc.ha {
				wantStrategy = appsv1.RollingUpdateDeploymentStrategyType
			}
			if d.Spec.Strategy.Type != wantStrategy {
				t.Errorf("strategy %s, want %s", d.Spec.Strategy.Type, wantStrategy)
			}
			if want := "ghcr.io/outboxd/outboxd:" + r.chart.Metadata.AppVersion; c.Image != want {
				t.Errorf("image %q, want %q (the release image, tag = appVersion)", c.Image, want)
			}

			// The password: an environment variable from the existing Secret, named in the config.
			var ref *corev1.SecretKeySelector
			for _, e := range c.Env {
				if e.Name == "OUTBOXD_MYSQL_PASSWORD" && e.ValueFrom != nil {
					ref = e.ValueFrom.SecretKeyRef
				}
			}
			if ref == nil || ref.Name != "outboxd-mysql" || ref.Key != "password" {
				t.Fatalf("env %+v: want OUTBOXD_MYSQL_PASSWORD from secretKeyRef outboxd-mysql/password", c.Env)
			}
			for _, e := range c.Env {
				if e.Value != "" {
					t.Errorf("env %s has a literal value; the chart passes secrets by reference only", e.Name)
				}
			}
			key, _ := mountedConfig(t, r.k8sManifests)
			data := r.configMap.Data[key]
			const pw = "not-in-any-configmap"
			t.Setenv("OUTBOXD_MYSQL_PASSWORD", pw)
			cfg, err := config.Parse([]byte(data))
			if err != nil {
				t.Fatalf("config.Parse rejects the rendered outboxd.yaml: %v\n%s", err, data)
			}
			if cfg.Source.Password != pw {
				t.Errorf("source.password = %q after expanding the environment, want the Secret's value", cfg.Source.Password)
			}
			if !strings.Contains(data, "${OUTBOXD_MYSQL_PASSWORD}") {
				t.Errorf("the rendered config does not name ${OUTBOXD_MYSQL_PASSWORD}:\n%s", data)
			}
			if cfg.HA.Enabled != tc.ha || cfg.Checkpoint.Store != "mysql" {
				t.Errorf("config ha.enabled %v checkpoint.store %q; want %v and mysql", cfg.HA.Enabled, cfg.Checkpoint.Store, tc.ha)
			}

			// Probes on the admin port: start-up and liveness on /healthz, readiness on /readyz.
			admin := adminPort(t, r.k8sManifests, cfg)
			for _, pr := range []struct {
				name, path string
				probe      *corev1.Probe
			}{{"startupProbe", "/healthz", c.StartupProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
				if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || !resolvesTo(pr.probe.HTTPGet.Port, admin) {
					t.Errorf("%s = %+v; want HTTP GET %s on the admin port %d", pr.name, pr.probe, pr.path, admin.ContainerPort)
				}
			}
			lim := c.Resources.Limits[corev1.ResourceMemory]
			if soft := softMemoryLimit(t); lim.Cmp(soft) <= 0 {
				t.Errorf("memory limit %s is not above outboxd's soft limit %s", lim.String(), soft.String())
			}

			// One eviction at a time, for exactly these pods.
			if r.pdb == nil || r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 ||
				!labels.Equals(r.pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("PodDisruptionBudget %+v; want maxUnavailable 1 selecting the Deployment's pods", r.pdb)
			}

			if !tc.ha {
				if r.serviceMonitor != nil {
					t.Error("a ServiceMonitor with serviceMonitor.enabled false")
				}
				return
			}
			sm := r.serviceMonitor
			if sm == nil {
				t.Fatal("no ServiceMonitor with serviceMonitor.enabled true")
			}
			spec, _ := sm["spec"].(map[string]any)
			eps, _ := spec["endpoints"].([]any)
			ep, _ := eps[0].(map[string]any)
			sel, _ := spec["selector"].(map[string]any)
			ml, _ := sel["matchLabels"].(map[string]any)
			if len(eps) != 1 || ep["port"] != "admin" || ep["path"] != "/metrics" {
				t.Errorf("ServiceMonitor endpoints %v; want port admin, path /metrics", eps)
			}
			for k, v := range ml {
				if r.service.Labels[k] != v {
					t.Errorf("ServiceMonitor selects %s=%v, which the metrics Service is not labelled with", k, v)
				}
			}
			if md, _ := sm["metadata"].(map[string]any); fmt.Sprint(md["labels"].(map[string]any)["release"]) != "prom" {
				t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", md["labels"])
			}
		})
	}
}

// The values hold no password: setting one in config is refused, as is HA on the file store,
// and values.schema.json refuses misspelt and mistyped keys of the chart's own.
func TestHelmRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		vals map[string]any
		want string
	}{
		"password in values": {map[string]any{"config": map[string]any{"source": map[string]any{"password": "x"}}}, "put the password in the Secret"},
		"ha on file store":   {map[string]any{"ha": map[string]any{"enabled": true}, "config": map[string]any{"checkpoint": map[string]any{"store": "file", "path": "/tmp/c.json", "table": nil, "name": nil}}}, "needs config.checkpoint.store: mysql"},
		// values.schema.json: a misspelt key of the chart's own is refused, not ignored (HA off
		// while the user thinks it on, no ServiceMonitor), and so is a wrong type.
		"ha.enable":             {map[string]any{"ha": map[string]any{"enable": true}}, "enable"},
		"serviceMonitor.enable": {map[string]any{"serviceMonitor": map[string]any{"enable": true}}, "enable"},
		"a top-level typo":      {map[string]any{"podAnnotation": map[string]any{"a": "b"}}, "podAnnotation"},
		"probe typo":            {map[string]any{"probes": map[string]any{"liveness": map[string]any{"periodSecond": 5}}}, "periodSecond"},
		"admin.port as text":    {map[string]any{"admin": map[string]any{"port": "http"}}, "port"},
		"one HA replica":        {map[string]any{"ha": map[string]any{"enabled": true, "replicas": 1}}, "replicas"},
	} {
		_, err := renderChart(t, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one saying %q", name, err, tc.want)
		}
	}
}

// extraEnv reaches the container after the password, for ${NAME} in config.
func TestHelmExtraEnv(t *testing.T) {
	env := []any{map[string]any{"name": "KAFKA_SASL_PASSWORD", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "outboxd-kafka", "key": "password"}}}}
	c := outboxdContainer(t, mustRender(t, map[string]any{"extraEnv": env}).deployment)
	if len(c.Env) != 2 || c.Env[1].Name != "KAFKA_SASL_PASSWORD" || c.Env[1].ValueFrom == nil || c.Env[1].ValueFrom.SecretKeyRef.Name != "outboxd-kafka" {
		t.Errorf("env %+v; want OUTBOXD_MYSQL_PASSWORD, then KAFKA_SASL_PASSWORD from outboxd-kafka", c.Env)
	}
}

// No ConfigMap of any rendering holds the Secret's value or a password key with a literal value.
func TestHelmNoPasswordInConfigMaps(t *testing.T) {
	for _, vals := range []map[string]any{nil, haValues} {
		r := mustRender(t, vals)
		for k, v := range r.configMap.Data {
			for _, l := range strings.Split(v, "\n") {
				if f := strings.TrimSpace(l); strings.HasPrefix(f, "password:") && f != "password: ${OUTBOXD_MYSQL_PASSWORD}" {
					t.Errorf("ConfigMap key %s: %q", k, f)
				}
			}
		}
	}
}
