package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// The move into exactly-once and back, as docs/concepts/exactly-once.md writes it: a file-store
// run, `checkpoint migrate --from-config` into the kafka store, an exactly-once run, and the
// migrate back into a (new) checkpoint file and an at-least-once run. No run sends again what
// the one before it covered: the read_committed readers see every committed row once.
func TestMigrateIntoAndOutOfExactlyOnce(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	fileCfg := simpleCfg(t, w, kc, w.position())
	fileCfg.Routes = "  - sink: main\n    topic: t\n"
	oldPath := writeCfg(t, fileCfg)
	eoCfg := fileCfg
	eoCfg.Dir = t.TempDir()
	useKafkaStore(t, kc, &eoCfg, "mig")
	eoPath := writeCfg(t, eoCfg)
	backCfg := fileCfg
	backCfg.Dir = t.TempDir() // a new checkpoint file
	backPath := writeCfg(t, backCfg)

	rd, err := kafkaread.NewReader(kc.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var committed []string
	// phase runs outboxd with cfg while a writer commits rows, until every row so far arrived,
	// then stops it gracefully.
	phase := func(name, cfg string) {
		t.Helper()
		p := startBinary(t, "run", "--config", cfg)
		kw := startKeyedWriter(t, w, 5*time.Millisecond)
		time.Sleep(700 * time.Millisecond)
		committed = append(committed, kw.halt(t)...)
		readBackCommitted(t, rd, kc.ListenAddrs()[0], committed, 30*time.Second, payloadSeq(t))
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s: graceful stop exited %d:\n%s", name, code, tail(p.output(), 30))
		}
	}
	show := func(cfg string) checkpoint.Checkpoint {
		t.Helper()
		code, out := runBinary(t, "checkpoint", "show", "--config", cfg)
		if code != 0 {
			t.Fatalf("checkpoint show --config %s exited %d:\n%s", cfg, code, out)
		}
		var c checkpoint.Checkpoint
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &c); err != nil {
			t.Fatalf("checkpoint show: %v\n%s", err, out)
		}
		return c
	}
	migrate := func(to, from string) {
		t.Helper()
		if code, out := runBinary(t, "checkpoint", "migrate", "--config", to, "--from-config", from); code != 0 {
			t.Fatalf("checkpoint migrate --config %s --from-config %s exited %d:\n%s", to, from, code, out)
		}
	}

	phase("file store", oldPath)
	migrate(eoPath, oldPath)
	if a, b := show(oldPath).GTIDSet, show(eoPath).GTIDSet; a != b {
		t.Fatalf("after migrate into the kafka store: file %s, kafka %s", a, b)
	}
	// Into a store that holds a checkpoint already: refused without --overwrite.
	if code, out := runBinary(t, "checkpoint", "migrate", "--config", eoPath, "--from-config", oldPath); code == 0 || !strings.Contains(out, "--overwrite") {
		t.Fatalf("a second migrate into the kafka store: exit %d, want a refusal naming --overwrite:\n%s", code, out)
	}
	phase("exactly once", eoPath)
	migrate(backPath, eoPath)
	if a, b := show(eoPath).GTIDSet, show(backPath).GTIDSet; a != b {
		t.Fatalf("after migrate out of the kafka store: kafka %s, file %s", a, b)
	}
	phase("back at least once", backPath)

	rb := readBackCommitted(t, rd, kc.ListenAddrs()[0], committed, 30*time.Second, payloadSeq(t))
	t.Logf("%d committed over three runs; franz-go read %d, kcat %d", len(committed), rb.franz.Records, rb.kcat.Records)
	if rb.franz.Duplicates != 0 || rb.kcat.Duplicates != 0 {
		t.Fatalf("a run sent again what the migrated checkpoint covered: duplicates franz-go %d, kcat %d",
			rb.franz.Duplicates, rb.kcat.Duplicates)
	}
}
