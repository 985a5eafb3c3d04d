package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/checkpoint"
)

const importdata = "../../checkpoint/importpos/testdata/"

// checkpoint import's help names every flag in its synopsis, and its flag mistakes exit 2
// naming what to change.
func TestCheckpointImportFlags(t *testing.T) {
	err, out, _ := run("checkpoint", "import", "--help")
	if err != nil || !strings.HasPrefix(out, "Usage: outboxd checkpoint import ") {
		t.Fatalf("checkpoint import --help: %v\n%s", err, out)
	}
	synopsis, _, _ := strings.Cut(out, "\n")
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out, -1) {
		if !strings.Contains(synopsis, "--"+m[1]) {
			t.Errorf("the synopsis lacks --%s: %s", m[1], synopsis)
		}
	}
	cfg := writeConfig(t, t.TempDir())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "kafka-connect"}, "want debezium, maxwell or canal"},
		{[]string{"--from", "debezium"}, "--file or --offsets-topic is required with --from debezium"},
		{[]string{"--from", "maxwell", "--file", "x"}, "--file and --offsets-topic are not used with --from maxwell"},
		{[]string{"--from", "canal", "--file", importdata + "canal-meta.dat", "--binlog-gtid-pos"}, "--binlog-gtid-pos is for --from debezium only"},
		{[]string{"--from", "canal", "--file", filepath.Join(t.TempDir(), "missing.dat")}, "--file: open"},
		{[]string{"--from", "debezium", "--offsets-topic", "connect-offsets"}, "--offsets-topic needs --connector"},
		{[]string{"--from", "canal", "--offsets-topic", "connect-offsets"}, "--offsets-topic is for --from debezium only"},
		{[]string{"--from", "debezium", "--offsets-topic", "t", "--file", "f", "--connector", "c"}, "either --file or --offsets-topic"},
		{[]string{"--from", "debezium", "--offsets-topic", "t", "--connector", "c", "--kafka-sink", "nope"}, `--kafka-sink "nope" is not a Kafka sink`},
	} {
		err, _, _ := run(append([]string{"checkpoint", "import", "--config", cfg}, c.args...)...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d (%v), want 2 and %q", c.args, exitCode(err), err, c.want)
		}
	}
}

// An offset with gtids becomes the checkpoint file (--force: no source to check against here);
// one without is refused with exit 1 and how to get a GTID set, and the file stays as it was.
func TestCheckpointImportIntoFile(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir)
	err, _, _ := run("checkpoint", "import", "--config", cfg, "--from", "debezium", "--file", importdata+"debezium-no-gtids.json", "--force")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "no GTID set") {
		t.Fatalf("import without gtids: exit %d (%v), want 1", exitCode(err), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused import wrote the checkpoint: %v", err)
	}
	err, out, _ := run("checkpoint", "import", "--config", cfg, "--from", "debezium", "--file", importdata+"debezium-mariadb.json", "--force")
	if err != nil || !strings.Contains(out, "(none) -> 0-1-42,1-1-7") {
		t.Fatalf("import: %v\n%s", err, out)
	}
	cp, err := checkpoint.Read(filepath.Join(dir, "checkpoint.json"))
	if err != nil || cp == nil || cp.GTIDSet != "0-1-42,1-1-7" || len(cp.Scope.Tables) != 1 {
		t.Fatalf("checkpoint after import: %+v, %v", cp, err)
	}
	err, _, _ = run("checkpoint", "import", "--config", cfg, "--from", "debezium", "--file", importdata+"debezium-mariadb.json", "--force")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("second import: exit %d (%v), want 1 naming --overwrite", exitCode(err), err)
	}
}

// --offsets-topic reads Kafka Connect's offsets topic on the config's Kafka sink: the
// connector's last record becomes the checkpoint, other connectors' records (and their
// tombstones) do not matter.
func TestCheckpointImportFromOffsetsTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(5, "connect-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range []struct{ key, value string }{
		{`["outbox",{"server":"shop"}]`, `{"file":"mariadb-bin.000001","pos":4,"gtids":"0-1-3"}`},
		{`["billing",{"server":"b"}]`, `{"file":"mariadb-bin.000001","pos":9,"gtids":"0-1-9"}`},
		{`["outbox",{"server":"shop"}]`, `{"file":"mariadb-bin.000001","pos":99,"gtids":"0-1-5"}`},
		{`["billing",{"server":"b"}]`, ""},
	} {
		rec := &kgo.Record{Topic: "connect-offsets", Key: []byte(r.key)}
		if r.value != "" {
			rec.Value = []byte(r.value)
		}
		if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir)
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text = []byte(strings.Replace(string(text), `brokers: ["127.0.0.1:1"]`, `brokers: ["`+c.ListenAddrs()[0]+`"]`, 1))
	if err := os.WriteFile(cfg, text, 0o600); err != nil {
		t.Fatal(err)
	}
	err, out, _ := run("checkpoint", "import", "--config", cfg, "--from", "debezium", "--offsets-topic", "connect-offsets", "--connector", "outbox", "--force")
	if err != nil || !strings.Contains(out, "-> 0-1-5") {
		t.Fatalf("import from the offsets topic: %v\n%s", err, out)
	}
	if cp, err := checkpoint.Read(filepath.Join(dir, "checkpoint.json")); err != nil || cp == nil || cp.GTIDSet != "0-1-5" {
		t.Fatalf("checkpoint: %+v, %v", cp, err)
	}
	err, _, _ = run("checkpoint", "import", "--config", cfg, "--from", "debezium", "--offsets-topic", "connect-offsets", "--connector", "billing", "--force", "--overwrite")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "tombstone") {
		t.Fatalf("import of a deleted offset: exit %d (%v), want 1 naming the tombstone", exitCode(err), err)
	}
}
