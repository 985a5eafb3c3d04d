package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/release"
)

// No cluster runs here: these tests decode every manifest of deploy/kubernetes strictly into
// the k8s.io/api types (an unknown or misspelt field is an error, as the API server's strict
// field validation would report it) and check what must hold between the objects, the config
// they mount, the Dockerfile, the release image and the compose stack.

// pipelineDrain is the pipeline's default DrainTimeout (pipeline.Config): how long the sends in
// flight may go on after SIGTERM before the checkpoint is saved.
const pipelineDrain = 30

// softMemoryLimit is the runtime memory limit outboxd sets itself without GOMEMLIMIT
// (softMemoryLimitMiB in cmd/outboxd); the container's hard limit must sit above it.
func softMemoryLimit(t *testing.T) resource.Quantity {
	return resource.MustParse(strconv.Itoa(softMemoryLimitMiB(t)) + "Mi")
}

// k8sManifests is every object of deploy/kubernetes, one of each kind.
type k8sManifests struct {
	files      []string // the manifest files (not kustomization.yaml), sorted
	deployment *appsv1.Deployment
	configMap  *corev1.ConfigMap
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
}

// kustomization is the part of kustomize's Kustomization the directory uses; decoded strictly
// too, so a field this test does not know about has to be added here on purpose.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func k8sDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy", "kubernetes") }

// docSep splits a file into its YAML documents.
var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeManifest decodes one YAML document strictly into the k8s.io/api type its apiVersion and
// kind name. A Secret is refused: the directory only refers to one.
func decodeManifest(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "v1 Secret":
		return nil, errors.New("a Secret: commit none, the Deployment only refers to one (see kustomization.yaml)")
	default:
		return nil, fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func loadK8s(t *testing.T) k8sManifests {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(k8sDir(t), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m k8sManifests
	seen := map[string]string{}
	for _, p := range paths {
		name := filepath.Base(p)
		if name == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, name)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docSep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, err := decodeManifest([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var meta *metav1.ObjectMeta
			switch o := obj.(type) {
			case *appsv1.Deployment:
				m.deployment, meta = o, &o.ObjectMeta
			case *corev1.ConfigMap:
				m.configMap, meta = o, &o.ObjectMeta
			case *corev1.Service:
				m.service, meta = o, &o.ObjectMeta
			case *policyv1.PodDisruptionBudget:
				m.pdb, meta = o, &o.ObjectMeta
			}
			kind := typeName(obj)
			if prev, dup := seen[kind]; dup {
				t.Fatalf("%s: a second %s (the first is in %s)", name, kind, prev)
			}
			seen[kind] = name
			// The namespace is left to kubectl -n or kustomize's namespace:.
			if errs := apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")); len(errs) > 0 {
				t.Errorf("%s: %v", name, errs.ToAggregate())
			}
		}
	}
	if m.deployment == nil || m.configMap == nil || m.service == nil || m.pdb == nil {
		t.Fatalf("deploy/kubernetes has %v; want a Deployment, a ConfigMap, a Service and a PodDisruptionBudget", seen)
	}
	return m
}

func typeName(v any) string {
	switch v.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *corev1.Service:
		return "Service"
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	}
	return "?"
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// outboxdContainer returns the Deployment's only container.
func outboxdContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if cs := d.Spec.Template.Spec.Containers; len(cs) != 1 || cs[0].Name != "outboxd" {
		t.Fatalf("the Deployment's containers are %d (%v); want the one container outboxd", len(cs), cs)
	}
	return d.Spec.Template.Spec.Containers[0]
}

// mountedConfig returns the config file the container's --config names: the ConfigMap key
// behind it, and the config loaded with outboxd's loader (secrets not read).
func mountedConfig(t *testing.T, m k8sManifests) (key string, cfg *config.Config) {
	t.Helper()
	c := outboxdContainer(t, m.deployment)
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %v name no --config", c.Args)
	}
	path := c.Args[i+1]
	mount, vol := mountOf(t, m.deployment, filepath.Dir(path))
	if vol.ConfigMap == nil || vol.ConfigMap.Name != m.configMap.Name {
		t.Fatalf("--config %s is on volume %s (%+v), not the ConfigMap %s", path, mount.Name, vol.VolumeSource, m.configMap.Name)
	}
	key = filepath.Base(path)
	for _, it := range vol.ConfigMap.Items {
		if it.Path == filepath.Base(path) {
			key = it.Key
		}
	}
	data, ok := m.configMap.Data[key]
	if !ok {
		t.Fatalf("--config %s is key %s of ConfigMap %s, which has keys %v", path, key, m.configMap.Name, keysOf(m.configMap.Data))
	}
	f := filepath.Join(t.TempDir(), "outboxd.yaml")
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWithoutSecrets(f)
	if err != nil {
		t.Fatalf("outboxd's config loader rejects ConfigMap %s key %s: %v", m.configMap.Name, key, err)
	}
	return key, cfg
}

func keysOf(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// mountOf returns the container's volume mount at dir and the pod volume it names.
func mountOf(t *testing.T, d *appsv1.Deployment, dir string) (corev1.VolumeMount, corev1.Volume) {
	t.Helper()
	for _, vm := range outboxdContainer(t, d).VolumeMounts {
		if vm.MountPath == dir {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == vm.Name {
					return vm, v
				}
			}
			t.Fatalf("the mount at %s names volume %s, which the pod does not have", dir, vm.Name)
		}
	}
	t.Fatalf("the container mounts nothing at %s", dir)
	return corev1.VolumeMount{}, corev1.Volume{}
}

// adminPort returns the container port the admin server listens on, after checking that
// admin.listen binds every interface of the pod on it.
func adminPort(t *testing.T, m k8sManifests, cfg *config.Config) corev1.ContainerPort {
	t.Helper()
	host, port, err := net.SplitHostPort(cfg.Admin.Addr())
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("admin.listen = %q; want 0.0.0.0:PORT (the kubelet and Prometheus reach the pod's IP, not its loopback)", cfg.Admin.Addr())
	}
	n, _ := strconv.Atoi(port)
	for _, cp := range outboxdContainer(t, m.deployment).Ports {
		if int(cp.ContainerPort) == n {
			return cp
		}
	}
	t.Fatalf("admin.listen port %d is not a containerPort of outboxd", n)
	return corev1.ContainerPort{}
}

// resolvesTo reports whether p, a port number or a port name, names container port cp.
func resolvesTo(p intstr.IntOrString, cp corev1.ContainerPort) bool {
	if p.Type == intstr.String {
		return cp.Name != "" && p.StrVal == cp.Name
	}
	return p.IntVal == cp.ContainerPort
}

func podLabels(m k8sManifests) labels.Set { return labels.Set(m.deployment.Spec.Template.Labels) }

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	m := loadK8s(t)
	data, err := os.ReadFile(filepath.Join(k8sDir(t), "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	res := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(res, m.files) {
		t.Errorf("kustomization.yaml resources = %v, want every manifest of the directory: %v", res, m.files)
	}
	// One entry for the container image, which says the same name and tag (so overriding newTag
	// is how a user picks another release).
	name, tag := splitImage(outboxdContainer(t, m.deployment).Image)
	if len(k.Images) != 1 || k.Images[0].Name != name || k.Images[0].NewName != name || k.Images[0].NewTag != tag {
		t.Errorf("kustomization.yaml images = %+v; want one entry for the container image %s, with newName %[2]s and newTag %s", k.Images, name, tag)
	}
}

// The checker itself: a misspelt field is an error, not silently dropped.
func TestKubernetesStrictDecodeRejectsUnknownFields(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(k8sDir(t), "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(data, []byte("  replicas: 2\n"), []byte("  replica: 2\n"), 1)
	if bytes.Equal(bad, data) {
		t.Fatal("deployment.yaml has no line \"  replicas: 2\" to misspell")
	}
	if _, err := decodeManifest(bad); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("a Deployment with spec.replica decodes (err %v); strict decoding must reject it", err)
	}
	if _, err := decodeManifest([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\nstringData: {password: x}\n")); err == nil {
		t.Error("a Secret manifest is accepted; the directory must only refer to the Secret")
	}
}

// The config the pods mount is one outboxd accepts, runs HA with the MySQL store, and reads
// the password from the mounted Secret.
func TestKubernetesConfigMap(t *testing.T) {
	m := loadK8s(t)
	key, cfg := mountedConfig(t, m)
	cp := cfg.Checkpoint
	if !cp.MySQL() || cp.Table != "outboxd.checkpoint" || cp.Name == "" {
		t.Errorf("checkpoint = %+v; want store mysql, table outboxd.checkpoint and a name: two pods share no disk", cp)
	}
	if !cfg.HA.Enabled {
		t.Error("ha.enabled is not true: two replicas without the lock would both send")
	}

	// The password comes from the Secret's mounted file, not from an environment variable.
	pf := cfg.Source.PasswordFile
	mount, vol := mountOf(t, m.deployment, filepath.Dir(pf))
	if vol.Secret == nil || vol.Secret.SecretName == "" || !mount.ReadOnly {
		t.Fatalf("source.password_file %s is on volume %s (%+v, read-only %v); want a read-only Secret volume", pf, mount.Name, vol.VolumeSource, mount.ReadOnly)
	}
	if !slices.ContainsFunc(vol.Secret.Items, func(kp corev1.KeyToPath) bool { return kp.Path == filepath.Base(pf) }) {
		t.Errorf("Secret volume %s has items %+v, none at %s", vol.Name, vol.Secret.Items, filepath.Base(pf))
	}
	// Loaded for real with the file where the kubelet would put it: the value is the file's,
	// its trailing newline trimmed.
	secretDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretDir, filepath.Base(pf)), []byte("s3cret'\"#\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "outboxd.yaml")
	text := strings.ReplaceAll(m.configMap.Data[key], filepath.Dir(pf)+"/", secretDir+"/")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	full, err := config.Load(f)
	if err != nil {
		t.Fatalf("config.Load with the secret file in place: %v", err)
	}
	if full.Source.Password != "s3cret'\"#" {
		t.Errorf("source.password loaded from the secret file does not match")
	}

	// The Secret's file is readable by the container's user: by its group (fsGroup) or by all.
	psc := m.deployment.Spec.Template.Spec.SecurityContext
	mode := int32(0o644)
	if vol.Secret.DefaultMode != nil {
		mode = *vol.Secret.DefaultMode
	}
	if mode&0o004 == 0 && (mode&0o040 == 0 || psc == nil || psc.FSGroup == nil) {
		t.Errorf("secret file mode %o with fsGroup %v: the non-root user cannot read it", mode, psc.FSGroup)
	}
	adminPort(t, m, cfg)
}

func TestKubernetesDeployment(t *testing.T) {
	m := loadK8s(t)
	d := m.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2 (a leader and a hot standby)", d.Spec.Replicas)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels(m)) {
		t.Fatalf("selector %v (err %v) does not match the pod labels %v", d.Spec.Selector, err, podLabels(m))
	}
	// A new pod comes up (as a ready standby) before an old one stops, so a standby is there
	// whenever the leader goes.
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy = %+v; want RollingUpdate with maxUnavailable 0", d.Spec.Strategy)
	}

	// The image is the released one (`make release`, internal/release), at a release version;
	// it runs as docker-compose.yml runs the Dockerfile's (the image's ENTRYPOINT, the same args).
	p := project(t)
	ob := service(t, p, "outboxd")
	c := outboxdContainer(t, d)
	if repo, tag := splitImage(c.Image); repo != release.Repository || !releaseTag.MatchString(tag) {
		t.Errorf("image = %q, want %s:vMAJOR.MINOR.PATCH, the image make release builds", c.Image, release.Repository)
	}
	if len(c.Command) != 0 || !slices.Equal(c.Args, ob.Command) {
		t.Errorf("command %v args %v; want the image's ENTRYPOINT with args %v as in docker-compose.yml", c.Command, c.Args, ob.Command)
	}

	// Drain before the kill: at least the compose stack's stop grace period, which covers the
	// pipeline's 30 s drain and the checkpoint save after it.
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if ob.StopGracePeriod == nil {
		t.Fatal("docker-compose.yml sets no stop_grace_period for outboxd")
	}
	composeGrace := int64(*ob.StopGracePeriod) / 1e9
	if grace == nil || *grace <= pipelineDrain || *grace < composeGrace {
		t.Errorf("terminationGracePeriodSeconds = %s; want more than the %d s drain and at least compose's %d s", fmtPtr(grace), pipelineDrain, composeGrace)
	}

	// Non-root, as the image's user, with nothing writable and no privileges.
	uid := dockerfileUID(t)
	if uid != release.UID {
		t.Errorf("the Dockerfile's user is %d, the release image's %d; the manifests serve both", uid, release.UID)
	}
	psc := d.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != uid {
		t.Errorf("pod securityContext %+v; want runAsNonRoot and runAsUser %d (the Dockerfile's user)", psc, uid)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		(sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		len(sc.Capabilities.Add) > 0 || (sc.RunAsUser != nil && *sc.RunAsUser == 0) {
		t.Errorf("container securityContext %+v; want readOnlyRootFilesystem, no privilege escalation, capabilities drop ALL", sc)
	}
	if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("automountServiceAccountToken is not false; outboxd does not use the Kubernetes API")
	}

	// With a read-only root filesystem every path outboxd writes must be a volume; with the
	// mysql store it writes none, so every mount is read-only configuration.
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		if _, ok := vols[vm.Name]; !ok {
			t.Errorf("mount %s at %s names no volume of the pod", vm.Name, vm.MountPath)
		}
		if !vm.ReadOnly {
			t.Errorf("mount %s at %s is writable; the mysql store needs no writable path", vm.Name, vm.MountPath)
		}
	}

	// Probes on the admin port admin.listen binds: liveness (and start-up) on /healthz, readiness on /readyz.
	_, cfg := mountedConfig(t, m)
	admin := adminPort(t, m, cfg)
	for _, pr := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}, {"startupProbe", "/healthz", c.StartupProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s = %+v; want an HTTP GET of %s", pr.name, pr.probe, pr.path)
			continue
		}
		g := pr.probe.HTTPGet
		if g.Path != pr.path || !resolvesTo(g.Port, admin) || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) {
			t.Errorf("%s gets %s %s on port %s; want HTTP %s on the admin port %d", pr.name, g.Scheme, g.Path, g.Port.String(), pr.path, admin.ContainerPort)
		}
	}

	// Memory: above the soft limit outboxd sets itself, so the GC works before the kernel kills.
	res := c.Resources
	lim, req := res.Limits[corev1.ResourceMemory], res.Requests[corev1.ResourceMemory]
	softMemoryLimit := softMemoryLimit(t)
	if lim.Cmp(softMemoryLimit) <= 0 || req.IsZero() || req.Cmp(lim) > 0 || res.Requests.Cpu().IsZero() {
		t.Errorf("memory request %s limit %s, CPU request %s; want a memory limit above outboxd's soft limit %s, a memory request up to it, a CPU request",
			req.String(), lim.String(), res.Requests.Cpu().String(), softMemoryLimit.String())
	}
	// A CPU limit below one core throttles the lock pings the lease is measured against.
	if cpu, ok := res.Limits[corev1.ResourceCPU]; ok && cpu.Cmp(resource.MustParse("1")) < 0 {
		t.Errorf("CPU limit %s is below 1", cpu.String())
	}

	// The two pods prefer different nodes.
	aff := d.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Fatalf("affinity %+v; want a preferred pod anti-affinity", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	asel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if term.TopologyKey != corev1.LabelHostname || err != nil || asel.Empty() || !asel.Matches(podLabels(m)) {
		t.Errorf("anti-affinity term %+v; want topologyKey %s and a selector of these pods", term, corev1.LabelHostname)
	}
}

func fmtPtr(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

// releaseTag is the tag of a released image: make release's VERSION at a release tag.
var releaseTag = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// splitImage splits an image reference REPO:TAG at the tag's colon (a registry's port comes
// before a slash).
func splitImage(ref string) (repo, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// dockerfileUID is the numeric user the final stage's files belong to (--chown=UID:GID): the
// distroless "nonroot" user the image runs as.
func dockerfileUID(t *testing.T) int64 {
	t.Helper()
	stages := dockerfileStages(t)
	final := stages[len(stages)-1]
	if u := final.instr("USER"); u != "nonroot:nonroot" {
		t.Fatalf("the final stage's USER is %q; this test knows nonroot's uid from --chown only", u)
	}
	for _, in := range final.instrs {
		if m := regexp.MustCompile(`--chown=(\d+):`).FindStringSubmatch(in[1]); in[0] == "COPY" && m != nil {
			uid, _ := strconv.ParseInt(m[1], 10, 64)
			return uid
		}
	}
	t.Fatal("the final stage has no COPY --chown=UID:GID naming nonroot's uid")
	return 0
}

func TestKubernetesPodDisruptionBudget(t *testing.T) {
	m := loadK8s(t)
	pdb := m.pdb
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels(m)) {
		t.Fatalf("PDB selector %v (err %v) does not match the pod labels %v", pdb.Spec.Selector, err, podLabels(m))
	}
	// With both pods ready, a drain may take exactly one: never both, and not none (a budget
	// that allows nothing blocks every node drain).
	replicas := int(*m.deployment.Spec.Replicas)
	var allowed int
	switch {
	case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable == nil:
		allowed, err = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, replicas, true)
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable == nil:
		var minAvail int
		minAvail, err = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, replicas, true)
		allowed = replicas - minAvail
	default:
		t.Fatalf("PDB sets minAvailable %v and maxUnavailable %v; set exactly one", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
	}
	if err != nil || allowed != 1 {
		t.Errorf("the PDB allows %d of %d pods to be evicted (err %v); want 1", allowed, replicas, err)
	}
}

func TestKubernetesMetricsService(t *testing.T) {
	m := loadK8s(t)
	svc := m.service
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels(m)) {
		t.Fatalf("Service selector %v does not match the pod labels %v", svc.Spec.Selector, podLabels(m))
	}
	_, cfg := mountedConfig(t, m)
	admin := adminPort(t, m, cfg)
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service ports = %+v; want the admin port only", svc.Spec.Ports)
	}
	sp := svc.Spec.Ports[0]
	target := sp.TargetPort
	if target.Type == intstr.Int && target.IntVal == 0 {
		target = intstr.FromInt32(sp.Port) // targetPort defaults to port
	}
	if !resolvesTo(target, admin) {
		t.Errorf("Service port %d targets %s, not the admin port %d (%s)", sp.Port, target.String(), admin.ContainerPort, admin.Name)
	}
	a := svc.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/port"] != strconv.Itoa(int(admin.ContainerPort)) {
		t.Errorf("annotations %v; want prometheus.io/scrape \"true\", path /metrics, port %d", a, admin.ContainerPort)
	}
}
