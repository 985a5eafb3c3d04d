package deploy_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// stackEnv is what a user puts in .env. The outboxd password holds characters that need quoting
// in SQL and in a shell, so the init scripts are exercised with them.
var stackEnv = map[string]string{
	"OUTBOXD_MYSQL_PASSWORD": `o'ut\box"d $HOME #1`,
	"SHOP_MYSQL_PASSWORD":    "shop-secret",
	"MYSQL_ROOT_PASSWORD":    "root-secret",
	"GRAFANA_ADMIN_PASSWORD": "grafana-secret",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func loadProject(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(list))
	if err != nil {
		return nil, err
	}
	return cli.ProjectFromOptions(context.Background(), opts)
}

func project(t *testing.T) *types.Project {
	t.Helper()
	p, err := loadProject(t, stackEnv)
	if err != nil {
		t.Fatalf("compose-go cannot load docker-compose.yml: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("service %s is missing", name)
	}
	return s
}

func TestServices(t *testing.T) {
	p := project(t)
	want := []string{"grafana", "kafka", "kafka-topics", "mysql", "outboxd", "prometheus", "rmq-broker",
		"rmq-broker-store", "rmq-namesrv", "rmq-topics", "shopapp"}
	got := p.ServiceNames()
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("services = %v, want %v", got, want)
	}
	for _, name := range []string{"mysql", "kafka", "rmq-namesrv", "rmq-broker", "outboxd"} {
		if hc := service(t, p, name).HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	if s := service(t, p, "outboxd"); s.Restart != types.RestartPolicyUnlessStopped {
		t.Errorf("outboxd restart = %q, want unless-stopped", s.Restart)
	}
}

func TestSecretsComeFromTheEnvironment(t *testing.T) {
	for _, missing := range []string{"OUTBOXD_MYSQL_PASSWORD", "SHOP_MYSQL_PASSWORD", "MYSQL_ROOT_PASSWORD", "GRAFANA_ADMIN_PASSWORD"} {
		env := maps(stackEnv)
		delete(env, missing)
		if _, err := loadProject(t, env); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("without %s: err = %v, want one naming it", missing, err)
		}
	}
	p := project(t)
	if got := service(t, p, "outboxd").Environment["OUTBOXD_MYSQL_PASSWORD"]; got == nil || *got != stackEnv["OUTBOXD_MYSQL_PASSWORD"] {
		t.Errorf("outboxd gets OUTBOXD_MYSQL_PASSWORD = %v", got)
	}
	// Grafana's admin password has no default (it used to be "admin").
	if got := service(t, p, "grafana").Environment["GF_SECURITY_ADMIN_PASSWORD"]; got == nil || *got != stackEnv["GRAFANA_ADMIN_PASSWORD"] {
		t.Errorf("grafana gets GF_SECURITY_ADMIN_PASSWORD = %v, want GRAFANA_ADMIN_PASSWORD", got)
	}
}

func maps(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestOutboxdBuildAndDependencies(t *testing.T) {
	p := project(t)
	root := repoRoot(t)
	stages := dockerfileStages(t)
	for name, target := range map[string]string{"outboxd": "outboxd", "shopapp": "shopapp"} {
		b := service(t, p, name).Build
		if b == nil {
			t.Fatalf("%s is not built", name)
		}
		df := b.Dockerfile
		if !filepath.IsAbs(df) {
			df = filepath.Join(b.Context, df)
		}
		if b.Context != root || df != filepath.Join(root, "Dockerfile") || b.Target != target {
			t.Errorf("%s builds context %s, Dockerfile %s, target %q; want %s, the repo's Dockerfile, %q",
				name, b.Context, df, b.Target, root, target)
		}
		if !slices.ContainsFunc(stages, func(s stage) bool { return s.name == target }) {
			t.Errorf("the Dockerfile has no stage %q for service %s", target, name)
		}
	}
	deps := service(t, p, "outboxd").DependsOn
	for dep, cond := range map[string]string{
		"mysql": types.ServiceConditionHealthy, "kafka": types.ServiceConditionHealthy,
		"rmq-namesrv": types.ServiceConditionHealthy, "rmq-broker": types.ServiceConditionHealthy,
		"kafka-topics": types.ServiceConditionCompletedSuccessfully, "rmq-topics": types.ServiceConditionCompletedSuccessfully,
	} {
		if d, ok := deps[dep]; !ok || d.Condition != cond {
			t.Errorf("outboxd depends_on %s: %+v (present %v), want condition %s", dep, d, ok, cond)
		}
	}
	if d := service(t, p, "shopapp").DependsOn["mysql"]; d.Condition != types.ServiceConditionHealthy {
		t.Errorf("shopapp depends_on mysql = %+v, want service_healthy", d)
	}
}

func TestBindMountsExist(t *testing.T) {
	p := project(t)
	n := 0
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			n++
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s, which does not exist: %v", s.Name, v.Source, err)
			}
			if !strings.HasPrefix(v.Source, repoRoot(t)+string(filepath.Separator)) {
				t.Errorf("%s mounts %s from outside the repository", s.Name, v.Source)
			}
			if !v.ReadOnly {
				t.Errorf("%s mounts %s writable; configuration is mounted :ro", s.Name, v.Source)
			}
		}
	}
	if n < 7 {
		t.Errorf("found %d bind mounts, want the 7 config mounts", n)
	}
}

func TestPortsBindLoopbackOnly(t *testing.T) {
	p := project(t)
	published := map[string]bool{}
	for _, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s:%d on host IP %q; publish on 127.0.0.1 only", s.Name, port.Published, port.Target, port.HostIP)
			}
			published[fmt.Sprintf("%s:%s", s.Name, port.Published)] = true
		}
	}
	for _, want := range []string{"grafana:3000", "prometheus:9090", "outboxd:9120"} {
		if !published[want] {
			t.Errorf("%s is not published (have %v)", want, published)
		}
	}
}

func TestMySQLServerFlags(t *testing.T) {
	cmd := service(t, project(t), "mysql").Command
	for _, flag := range []string{"--log-bin=binlog", "--binlog-format=ROW", "--binlog-row-image=FULL",
		"--binlog-row-metadata=FULL", "--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--server-id=1"} {
		if !slices.Contains(cmd, flag) {
			t.Errorf("mysql command %v lacks %s", cmd, flag)
		}
	}
}

// bindSource returns the host path mounted at target in service s.
func bindSource(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source
		}
	}
	t.Fatalf("%s mounts nothing at %s", s.Name, target)
	return ""
}

// namedVolume returns the named volume (declared under volumes:) mounted at target in s.
func namedVolume(t *testing.T, p *types.Project, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == target {
			if _, ok := p.Volumes[v.Source]; !ok {
				t.Errorf("%s mounts volume %s, which volumes: does not declare", s.Name, v.Source)
			}
			return v.Source
		}
	}
	t.Errorf("%s has no named volume at %s", s.Name, target)
	return ""
}

// readProps reads a Java properties file (key = value lines, # comments).
func readProps(t *testing.T, path string) map[string]string {
	t.Helper()
	props := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			props[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return props
}

func TestOutboxdConfig(t *testing.T) {
	p := project(t)
	ob := service(t, p, "outboxd")
	const cfgPath = "/etc/outboxd/outboxd.yaml"
	src := bindSource(t, ob, cfgPath)
	if src != filepath.Join(repoRoot(t), "deploy", "outboxd", "outboxd.yaml") {
		t.Errorf("outboxd config comes from %s", src)
	}
	if !slices.Equal(ob.Command, []string{"run", "--config", cfgPath}) {
		t.Errorf("outboxd command = %v", ob.Command)
	}
	final := dockerfileStages(t)
	if cmd := final[len(final)-1].instr("CMD"); !strings.Contains(cmd, cfgPath) {
		t.Errorf("the image's CMD %q does not read %s", cmd, cfgPath)
	}

	t.Setenv("OUTBOXD_MYSQL_PASSWORD", stackEnv["OUTBOXD_MYSQL_PASSWORD"])
	cfg, err := config.Load(src)
	if err != nil {
		t.Fatalf("outboxd's config loader rejects %s: %v", src, err)
	}
	if cfg.Source.Flavor != "mysql" || cfg.Source.Addr != "mysql:3306" || cfg.Source.User != "outboxd" ||
		cfg.Source.Password != stackEnv["OUTBOXD_MYSQL_PASSWORD"] {
		t.Errorf("source = %s (password matches: %v)", cfg.Source, cfg.Source.Password == stackEnv["OUTBOXD_MYSQL_PASSWORD"])
	}
	// Every address must be a service name of the stack: the network has no fixed addresses.
	for name, s := range cfg.Sinks {
		for _, a := range append(slices.Clone(s.Brokers), s.Nameservers...) {
			host, _, _ := net.SplitHostPort(a)
			if _, ok := p.Services[host]; !ok {
				t.Errorf("sink %s address %s is not a compose service name", name, a)
			}
		}
	}
	if ns := cfg.Sinks["rocketmq"].Nameservers; !slices.Equal(ns, []string{"rmq-namesrv:9876"}) {
		t.Errorf("rocketmq nameservers = %v, want [rmq-namesrv:9876]", ns)
	}
	routes := map[string]config.Route{}
	for _, r := range cfg.Routes {
		routes[r.Match.Topic] = r
	}
	if r := routes["order.*"]; r.Sink != "kafka" || cfg.Sinks[r.Sink].Type != config.SinkKafka {
		t.Errorf("order.* route = %+v", r)
	}
	if r := routes["pay.*"]; r.Sink != "rocketmq" || r.Topic != "PAY_EVENT" || r.Tag != "{event_type}" ||
		cfg.Sinks[r.Sink].Type != config.SinkRocketMQ {
		t.Errorf("pay.* route = %+v", r)
	}
	// The checkpoint must live on a named volume, or a recreated container starts over.
	onVolume := false
	for _, v := range ob.Volumes {
		if v.Type == types.VolumeTypeVolume && filepath.Dir(cfg.Checkpoint.Path) == v.Target {
			onVolume = true
		}
	}
	if !onVolume {
		t.Errorf("checkpoint %s is not on a named volume of outboxd", cfg.Checkpoint.Path)
	}

	if cfg.Admin.Addr() != "0.0.0.0:9120" {
		t.Errorf("admin.listen = %q, want 0.0.0.0:9120 (reachable from Prometheus in the stack)", cfg.Admin.Addr())
	}
	if !slices.ContainsFunc(ob.Ports, func(pc types.ServicePortConfig) bool { return pc.Target == 9120 }) {
		t.Errorf("outboxd publishes %+v, not the admin port 9120", ob.Ports)
	}
	prom := bindSource(t, service(t, p, "prometheus"), "/etc/prometheus")
	promCfg, err := os.ReadFile(filepath.Join(prom, "prometheus.yml"))
	if err != nil || !strings.Contains(string(promCfg), "outboxd:9120") {
		t.Errorf("%s/prometheus.yml does not scrape outboxd:9120 (err %v)", prom, err)
	}
}

func TestRocketMQBrokerConf(t *testing.T) {
	p := project(t)
	broker := service(t, p, "rmq-broker")
	src := bindSource(t, broker, "/home/rocketmq/broker.conf")
	if !strings.Contains(strings.Join(broker.Command, " "), "-c /home/rocketmq/broker.conf") {
		t.Errorf("broker command %v does not read the mounted broker.conf", broker.Command)
	}
	props := readProps(t, src)
	// A service name, not a fixed IP: the client dials broker addresses by name (the e2e test
	// TestComposeBrokerHostNameAndHealth shows it with the real binary).
	if props["brokerIP1"] != "rmq-broker" {
		t.Errorf("brokerIP1 = %q, want the broker's service name rmq-broker", props["brokerIP1"])
	}
	if props["autoCreateTopicEnable"] != "true" {
		t.Errorf("autoCreateTopicEnable = %q", props["autoCreateTopicEnable"])
	}
	// The store is on a named volume that a one-shot service hands to the broker's user first.
	store := props["storePathRootDir"]
	vol := namedVolume(t, p, broker, store)
	init := service(t, p, "rmq-broker-store")
	if v := namedVolume(t, p, init, store); v != vol || init.User != "root" ||
		!slices.Equal(init.Entrypoint, []string{"chown", "rocketmq:rocketmq", store}) || init.Image != broker.Image {
		t.Errorf("rmq-broker-store: volume %s (broker's %s), user %q, entrypoint %v, image %s; want root chowning %s in the broker's image",
			v, vol, init.User, init.Entrypoint, init.Image, store)
	}
	if d := broker.DependsOn["rmq-broker-store"]; d.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("rmq-broker depends_on rmq-broker-store = %+v, want service_completed_successfully", d)
	}
}

// Every service that keeps state keeps it on a named volume, so `down` then `up` leaves the
// brokers and the database consistent with outboxd's checkpoint (also on a volume): a
// checkpoint ahead of an empty broker would mean events outboxd counts as delivered are gone.
func TestStateOnNamedVolumes(t *testing.T) {
	p := project(t)
	namedVolume(t, p, service(t, p, "mysql"), "/var/lib/mysql")
	kafka := service(t, p, "kafka")
	logDirs := kafka.Environment["KAFKA_LOG_DIRS"]
	if logDirs == nil || *logDirs == "" {
		t.Fatal("kafka: KAFKA_LOG_DIRS is not set; the image's default is /tmp/kraft-combined-logs, in the container")
	}
	namedVolume(t, p, kafka, *logDirs)
	namedVolume(t, p, service(t, p, "prometheus"), "/prometheus")
	// rmq-broker and outboxd: TestRocketMQBrokerConf and TestOutboxdConfig.
}

// The network has no fixed subnet or addresses, which collided with users' own networks.
func TestNoFixedAddresses(t *testing.T) {
	p := project(t)
	for name, n := range p.Networks {
		if len(n.Ipam.Config) > 0 {
			t.Errorf("network %s fixes ipam %+v", name, n.Ipam.Config)
		}
	}
	for _, s := range p.Services {
		for nw, n := range s.Networks {
			if n != nil && (n.Ipv4Address != "" || n.Ipv6Address != "") {
				t.Errorf("%s has a fixed address on %s: %s %s", s.Name, nw, n.Ipv4Address, n.Ipv6Address)
			}
		}
	}
}

// outboxd's healthcheck runs the image's own binary (distroless: no shell, no curl) with the
// health subcommand, aimed at admin.listen's port on loopback. The built binary accepts the
// exact arguments: it probes that URL (exit 0 or 1) rather than rejecting them (exit 2).
func TestOutboxdHealthcheck(t *testing.T) {
	p := project(t)
	hc := service(t, p, "outboxd").HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) < 3 {
		t.Fatalf("outboxd healthcheck = %+v", hc)
	}
	final := dockerfileStages(t)
	entry := final[len(final)-1].instr("ENTRYPOINT")
	if hc.Test[0] != "CMD" || entry != fmt.Sprintf("[%q]", hc.Test[1]) || hc.Test[2] != "health" {
		t.Errorf("healthcheck test %q: want [CMD <the image's ENTRYPOINT %s> health ...] (no shell in the image)", hc.Test, entry)
	}
	args := hc.Test[2:]
	i := slices.Index(args, "--addr")
	if i < 0 || i+1 >= len(args) || args[i+1] != "127.0.0.1:9120" {
		t.Errorf("healthcheck args %q: want --addr 127.0.0.1:9120 (admin.listen 0.0.0.0:9120, seen from inside)", args)
	}
	if hc.Interval == nil || hc.Timeout == nil || *hc.Timeout > *hc.Interval {
		t.Errorf("healthcheck interval %v, timeout %v", hc.Interval, hc.Timeout)
	}

	bin := filepath.Join(t.TempDir(), "outboxd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/outboxd")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build outboxd: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, append(args, "--timeout", "2s")...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if (code != 0 && code != 1) || !strings.Contains(string(out), "http://127.0.0.1:9120/healthz") {
		t.Errorf("%s %q: exit %d, want a probe of http://127.0.0.1:9120/healthz exiting 0 or 1\n%s", bin, args, code, out)
	}
}

// stage is one FROM … block of the Dockerfile.
type stage struct {
	base, name string
	instrs     [][2]string // instruction, rest of line
}

func (s stage) instr(name string) string {
	last := ""
	for _, in := range s.instrs {
		if in[0] == name {
			last = in[1]
		}
	}
	return last
}

func dockerfileStages(t *testing.T) []stage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	text := regexp.MustCompile(`\\\n`).ReplaceAllString(string(data), " ")
	var stages []stage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kw, rest, _ := strings.Cut(line, " ")
		kw = strings.ToUpper(kw)
		if kw == "FROM" {
			f := strings.Fields(rest)
			s := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, [2]string{kw, strings.TrimSpace(rest)})
		}
	}
	if len(stages) == 0 {
		t.Fatal("the Dockerfile has no FROM")
	}
	return stages
}

func TestDockerfileRunsAsNonRoot(t *testing.T) {
	stages := dockerfileStages(t)
	final := stages[len(stages)-1]
	if final.name != "outboxd" {
		t.Errorf("the final (default) stage is %q, want outboxd", final.name)
	}
	if !strings.HasPrefix(final.instr("ENTRYPOINT"), `["/usr/local/bin/outboxd"`) {
		t.Errorf("ENTRYPOINT = %q", final.instr("ENTRYPOINT"))
	}
	for _, s := range stages {
		if s.name != "outboxd" && s.name != "shopapp" {
			continue
		}
		user := s.instr("USER")
		nonrootBase := strings.HasSuffix(s.base, ":nonroot")
		userOK := user != "" && !regexp.MustCompile(`^(root|0)(:|$)`).MatchString(user)
		// USER decides when set; without one the distroless :nonroot base's default user holds.
		if !(userOK || (user == "" && nonrootBase)) {
			t.Errorf("stage %s (FROM %s, USER %q) would run as root", s.name, s.base, user)
		}
	}
	build := stages[0]
	for _, s := range stages {
		if s.name == "build-outboxd" {
			build = s
		}
	}
	run := build.instr("RUN")
	for _, want := range []string{"-trimpath", "-X main.version=${VERSION}", "-X main.commit=${COMMIT}", "./cmd/outboxd"} {
		if !strings.Contains(run, want) {
			t.Errorf("the outboxd build step lacks %s: %s", want, run)
		}
	}
	if !strings.Contains(build.instr("ENV")+stages[0].instr("ENV"), "CGO_ENABLED=0") {
		t.Error("the build does not set CGO_ENABLED=0 (the distroless static image has no libc)")
	}
}

// grantRE matches a GRANT statement of init.sql or a line of SHOW GRANTS.
var grantRE = regexp.MustCompile("(?is)^GRANT (.+?) ON (\\S+) TO [`']?(\\w+)[`']?@")

// grantsOf returns user's privileges as "PRIV ON object", object without backquotes. MariaDB's
// BINLOG MONITOR is its name for REPLICATION CLIENT.
func grantsOf(stmts []string, user string) []string {
	var out []string
	for _, st := range stmts {
		m := grantRE.FindStringSubmatch(strings.TrimSpace(st))
		if m == nil || m[3] != user {
			continue
		}
		obj := strings.ReplaceAll(m[2], "`", "")
		for _, priv := range strings.Split(m[1], ",") {
			priv = strings.ToUpper(strings.Join(strings.Fields(priv), " "))
			if priv == "BINLOG MONITOR" {
				priv = "REPLICATION CLIENT"
			}
			if priv != "USAGE" {
				out = append(out, priv+" ON "+obj)
			}
		}
	}
	sort.Strings(out)
	return out
}

var outboxdGrants = []string{"REPLICATION CLIENT ON *.*", "REPLICATION SLAVE ON *.*", "SELECT ON shop.outbox_event"}

func initSQL(t *testing.T) (path string, stmts []string) {
	t.Helper()
	path = bindSource(t, service(t, project(t), "mysql"), "/docker-entrypoint-initdb.d/10-init.sql")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	for _, st := range strings.Split(strings.Join(lines, "\n"), ";") {
		if st = strings.TrimSpace(st); st != "" {
			stmts = append(stmts, st)
		}
	}
	return path, stmts
}

func TestInitSQLGrantsLeastPrivileges(t *testing.T) {
	_, stmts := initSQL(t)
	if got := grantsOf(stmts, "outboxd"); !slices.Equal(got, outboxdGrants) {
		t.Errorf("init.sql grants outboxd %v, want exactly %v", got, outboxdGrants)
	}
	for _, st := range stmts {
		if regexp.MustCompile(`(?i)\bALL\b|WITH GRANT OPTION|IDENTIFIED`).MatchString(st) {
			t.Errorf("init.sql: %q grants too much or holds a password", st)
		}
	}
}

// TestInitScriptsOnMariaDB runs init.sql and 20-passwords.sh the way the mysql image's
// entrypoint does (the script sourced by bash, with docker_process_sql feeding the client), on a
// real MariaDB, then logs in as outboxd with the awkward password and reads its grants back.
func TestInitScriptsOnMariaDB(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	client, err := exec.LookPath("mariadb")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the mariadb client is missing (CI installs mariadb-server, which brings it)")
		}
		t.Skip("the mariadb client is missing: apt-get install -y mariadb-client")
	}
	sqlPath, _ := initSQL(t)
	shPath := bindSource(t, service(t, project(t), "mysql"), "/docker-entrypoint-initdb.d/20-passwords.sh")
	host, port, _ := net.SplitHostPort(srv.Addr)
	script := fmt.Sprintf(`set -e
docker_process_sql() { %q --protocol=TCP -h %s -P %s -u root "$@"; }
docker_process_sql < %q
. %q
`, client, host, port, sqlPath, shPath)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "OUTBOXD_MYSQL_PASSWORD="+stackEnv["OUTBOXD_MYSQL_PASSWORD"],
		"SHOP_MYSQL_PASSWORD="+stackEnv["SHOP_MYSQL_PASSWORD"])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("init scripts: %v\n%s", err, out)
	}

	login := func(user, pass string) *sql.DB {
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.User, cfg.Passwd = "tcp", srv.Addr, user, pass
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	ctx := t.Context()
	ob := login("outboxd", stackEnv["OUTBOXD_MYSQL_PASSWORD"])
	rows, err := ob.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		t.Fatalf("outboxd cannot log in with its password: %v", err)
	}
	var shown []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			t.Fatal(err)
		}
		shown = append(shown, g)
	}
	rows.Close()
	if got := grantsOf(shown, "outboxd"); !slices.Equal(got, outboxdGrants) {
		t.Errorf("outboxd holds %v (SHOW GRANTS %q), want exactly %v", got, shown, outboxdGrants)
	}
	if _, err := ob.ExecContext(ctx, "SELECT COUNT(*) FROM shop.outbox_event"); err != nil {
		t.Errorf("outboxd cannot read the outbox table: %v", err)
	}
	if _, err := ob.ExecContext(ctx, "SELECT COUNT(*) FROM shop.orders"); err == nil {
		t.Error("outboxd can read shop.orders; it must see only the outbox table")
	}
	// The columns outboxd's config names must exist in the table init.sql creates.
	t.Setenv("OUTBOXD_MYSQL_PASSWORD", "x")
	cfg, err := config.Load(filepath.Join(repoRoot(t), "deploy", "outboxd", "outboxd.yaml"))
	if err != nil {
		t.Fatalf("outboxd config: %v", err)
	}
	c := cfg.Tables[0].Columns
	for _, col := range []string{c.EventID, c.Key, c.Topic, c.Payload, c.EventType, c.Headers} {
		var n int
		if err := ob.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
			WHERE table_schema = ? AND table_name = ? AND column_name = ?`, cfg.Tables[0].Schema(), cfg.Tables[0].Name(), col).Scan(&n); err != nil || n != 1 {
			t.Errorf("column %s of %s: count %d, err %v", col, cfg.Tables[0].Table, n, err)
		}
	}

	shop := login("shopapp", stackEnv["SHOP_MYSQL_PASSWORD"])
	if _, err := shop.ExecContext(ctx, `INSERT INTO shop.outbox_event (event_id, biz_key, topic, payload) VALUES ('e1', 'k', 'order.created', '{}')`); err != nil {
		t.Errorf("shopapp cannot write the outbox: %v", err)
	}
	if _, err := shop.ExecContext(ctx, "DELETE FROM shop.orders"); err == nil {
		t.Error("shopapp may DELETE orders; it needs only SELECT and INSERT")
	}
}
