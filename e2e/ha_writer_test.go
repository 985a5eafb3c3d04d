package e2e

import (
	"strings"
	"testing"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// haCfg is o with ha on, the mysql store and a short lease, for two processes on one config.
func haCfg(t *testing.T, w *world, o *cfgOpts, name string) string {
	t.Helper()
	table := useMySQLStore(w, o, name)
	o.Extra += "ha: {enabled: true, lease: 2s}\nadmin: {listen: off}\n"
	return table
}

// A read-only writer (a replica, by mistake) is named by check and refused by run with ha:
// the lock would be that server's alone, so instances pointed at different replicas would
// all lead. root has SUPER, so nothing else would fail.
func TestHAReadOnlyWriterRefused(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	w := newWorld(t, srv)
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	haCfg(t, w, &o, "ha-ro")
	cfgPath := writeCfg(t, o)
	w.exec("SET GLOBAL read_only = 1")
	defer w.exec("SET GLOBAL read_only = 0")

	code, out := runBinary(t, "check", "--config", cfgPath)
	if code == 0 || !strings.Contains(out, "checkpoint_writer") || !strings.Contains(out, "writable primary") {
		t.Fatalf("check exited %d without naming the read-only writer:\n%s", code, out)
	}
	code, out = runBinary(t, "run", "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "read-only") || !strings.Contains(out, "checkpoint.writer_addr") {
		t.Fatalf("run exited %d, want 1 naming the read-only writer:\n%s", code, out)
	}
}
