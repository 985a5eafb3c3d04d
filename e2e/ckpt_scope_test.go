package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/daemon"
)

// Issue 21 item 5: with the mysql store and no ha, backfill, checkpoint set (--gtid and
// --from-checkpoint) refuse while an outboxd runs on the checkpoint, naming its holder; once it
// stopped the backfill runs.
func TestMySQLStoreCommandsRefuseWhileRunning(t *testing.T) {
	w, table, cfgPath, p, holder := runningOnMySQLStore(t, "busy")
	before, _ := storeRow(t, w.db, table, "busy")

	for _, args := range [][]string{
		{"backfill", "--config", cfgPath, "--table", w.schema + ".outbox_event", "--overwrite"},
		{"checkpoint", "set", "--config", cfgPath, "--gtid", w.position()},
		{"checkpoint", "set", "--config", cfgPath, "--from-checkpoint"},
	} {
		code, out := runBinary(t, args...)
		if code != 1 || !strings.Contains(out, holder) || !strings.Contains(out, "stop that outboxd") {
			t.Fatalf("%s while outboxd runs: exit %d, want 1 naming the holder %q:\n%s", strings.Join(args[:2], " "), code, holder, out)
		}
	}
	if !p.running() {
		t.Fatalf("outboxd stopped under the refused commands:\n%s", tail(p.output(), 30))
	}
	if after, _ := storeRow(t, w.db, table, "busy"); after != before {
		t.Fatalf("a refused command moved the row: %s -> %s", before, after)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("outboxd exit %d:\n%s", code, tail(p.output(), 30))
	}
	want := w.position()
	code, out := runBinary(t, "backfill", "--config", cfgPath, "--table", w.schema+".outbox_event", "--overwrite")
	if set, _ := storeRow(t, w.db, table, "busy"); code != 0 || set != want {
		t.Fatalf("backfill after outboxd stopped: exit %d, row %q, want %q:\n%s", code, set, want, out)
	}
}

// Issue 21 item 6: two configs relaying different tables under one checkpoint.name. The second
// refuses the first's checkpoint, naming the tables added and removed, with and without ha,
// and leaves the first running; every row of the first's table arrives, and the second's
// arrive once it has a checkpoint of its own.
func TestCheckpointScopeRefusesOtherTables(t *testing.T) {
	for _, ha := range []bool{false, true} {
		t.Run(fmt.Sprintf("ha=%v", ha), func(t *testing.T) {
			w := newWorld(t, sharedServer(t))
			w.exec("CREATE TABLE " + w.schema + ".outbox_b LIKE " + w.schema + ".outbox_event")
			kc := kafkaCluster(t, "t")
			pos0 := w.position()
			oa := simpleCfg(t, w, kc, pos0)
			useMySQLStore(w, &oa, "shared")
			ob := oa
			ob.Dir = t.TempDir()
			ob.Tables = []string{w.schema + ".outbox_b"}
			if ha {
				oa.Extra = "ha: {enabled: true, lease: 2s}\n"
				ob.Extra = oa.Extra
			}
			pa := startBinary(t, "run", "--config", writeCfg(t, oa))
			var evA, evB []string
			commit := func(n int) {
				for i := 0; i < n; i++ {
					a := fmt.Sprintf("a%03d", len(evA))
					b := fmt.Sprintf("b%03d", len(evB))
					w.commitTo("outbox_event", row{EventID: a, Key: "k" + a[len(a)-1:], Topic: "t", Payload: []byte(a)})
					w.commitTo("outbox_b", row{EventID: b, Key: "k" + b[len(b)-1:], Topic: "t", Payload: []byte(b)})
					evA, evB = append(evA, a), append(evB, b)
				}
			}
			commit(10)
			waitStoreRow(t, w.db, w.schema+".outboxd_checkpoint", "shared", w.position(), 30*time.Second)

			pb := startBinary(t, "run", "--config", writeCfg(t, ob))
			code := pb.wait(t, 30*time.Second)
			out := pb.output()
			if code == 0 || !strings.Contains(out, "tables added: "+w.schema+".outbox_b") ||
				!strings.Contains(out, "tables removed: "+w.schema+".outbox_event") || !strings.Contains(out, "--from-checkpoint") {
				t.Fatalf("second config: exit %d, want a refusal naming the table difference:\n%s", code, tail(out, 30))
			}
			commit(20)
			cons := newConsumer(t, kc, "t")
			cons.waitForEvent(evA[len(evA)-1], 30*time.Second)
			if !pa.running() {
				t.Fatalf("the first outboxd stopped:\n%s", tail(pa.output(), 30))
			}
			// The second config with a checkpoint of its own relays its table from the start.
			ob.Checkpoint = strings.Replace(ob.Checkpoint, "name: shared", "name: only-b", 1)
			ob.Start = pos0
			startBinary(t, "run", "--config", writeCfg(t, ob))
			cons.waitForEvent(evB[len(evB)-1], 30*time.Second)
			got := eventIDs(cons.settle(500 * time.Millisecond))
			for _, id := range append(slices.Clone(evA), evB...) {
				if !slices.Contains(got, id) {
					t.Fatalf("event %s never arrived (%d of %d received)", id, len(got), len(evA)+len(evB))
				}
			}
		})
	}
}

// Issue 21 item 7: the checkpoint row is deleted under an HA pair while rows flow. The leader
// keeps its last position as a tombstone and stops; the standby takes over, refuses the
// tombstone and stops too: nobody saves source.start. After `checkpoint set` with the position
// in the error, every row arrives.
func TestHACheckpointRowDeletedStops(t *testing.T) {
	h := newHAWorld(t, haOpts{Instances: 2})
	a, b := h.start(0), h.inst[1]
	h.waitRole(a, "leader", 30*time.Second)
	h.start(1)
	h.waitRole(b, "standby", 30*time.Second)
	f := h.startFlow("ev", 2*time.Millisecond)
	c := newConsumer(t, h.kc, "t")
	c.waitFor(200, 30*time.Second)

	h.w.exec("DELETE FROM "+h.table+" WHERE name = ?", h.ckName)
	codeA := a.p.wait(t, 30*time.Second)
	codeB := b.p.wait(t, 60*time.Second)
	for f.count() < 1000 {
		time.Sleep(20 * time.Millisecond)
	}
	committed := f.halt(t)
	r := h.row()
	if r.Holder != "lost" || r.GTIDSet == "" {
		t.Fatalf("row after the delete %+v, want the tombstone (holder lost) with the last position", r)
	}
	for _, in := range []*haInstance{a, b} {
		out := in.p.output()
		// a saved its first start, before the row existed; nothing may save one after the delete.
		if n, want := strings.Count(out, "start position saved"), map[string]int{"a": 1, "b": 0}[in.name]; n != want {
			t.Fatalf("outboxd %s saved %d start positions, want %d (a guessed start after the delete):\n%s", in.name, n, want, tail(out, 30))
		}
		if !strings.Contains(out, "was lost") || !strings.Contains(out, r.GTIDSet) {
			t.Fatalf("outboxd %s: want an error naming the lost checkpoint and %s:\n%s", in.name, r.GTIDSet, tail(out, 30))
		}
	}
	if codeA == 0 || codeB == 0 {
		t.Fatalf("exit codes a %d, b %d: want both non-zero", codeA, codeB)
	}

	code, out := runBinary(t, "checkpoint", "set", "--config", a.cfgPath, "--gtid", r.GTIDSet)
	if code != 0 {
		t.Fatalf("checkpoint set: exit %d:\n%s", code, out)
	}
	h.start(0)
	h.start(1)
	c.waitForEvent(committed[len(committed)-1], 60*time.Second)
	got := eventIDs(c.settle(500 * time.Millisecond))
	for _, id := range committed {
		if !slices.Contains(got, id) {
			t.Fatalf("event %s never arrived (%d committed, %d received)", id, len(committed), len(got))
		}
	}
}

// Issue 21 item 7 on the file store: the checkpoint file is removed while outboxd runs. The
// atomic write of the next save must not recreate it as if nothing happened (a crash before
// that save would have restarted from source.start, skipping what was committed meanwhile):
// the save writes its position as a tombstone and outboxd stops naming it; a restart refuses
// the tombstone, and after `checkpoint set --from-checkpoint` every row arrives.
func TestFileCheckpointRemovedWhileRunning(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, w.position())
	r := startRelay(t, o, daemon.Options{})
	g := w.commit(row{EventID: "e1", Key: "k", Topic: "t", Payload: []byte("1")})
	waitCheckpoint(t, o.Dir, g, 30*time.Second)
	if err := os.Remove(filepath.Join(o.Dir, "checkpoint.json")); err != nil {
		t.Fatal(err)
	}
	g = w.commit(row{EventID: "e2", Key: "k", Topic: "t", Payload: []byte("2")})
	err := r.waitExit(t, 30*time.Second)
	if !errors.Is(err, checkpoint.ErrCheckpointLost) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("outboxd after its checkpoint file was removed: %v, want it stopped on the lost checkpoint", err)
	}
	w.commit(row{EventID: "e3", Key: "k", Topic: "t", Payload: []byte("3")})

	o.Start = "latest"
	err = startRelay(t, o, daemon.Options{}).waitExit(t, 30*time.Second)
	if !errors.Is(err, checkpoint.ErrCheckpointLost) || !strings.Contains(err.Error(), g) {
		t.Fatalf("restart on the tombstone: %v, want the lost checkpoint naming %s", err, g)
	}
	if code, out := runBinary(t, "checkpoint", "set", "--config", writeCfg(t, o), "--from-checkpoint"); code != 0 {
		t.Fatalf("checkpoint set --from-checkpoint: exit %d:\n%s", code, out)
	}
	startRelay(t, o, daemon.Options{})
	newConsumer(t, kc, "t").waitForEvent("e3", 30*time.Second)
}

// `checkpoint set --accept-layout` alone records the current layouts and keeps the position;
// it must not also clear a tombstone or adopt a checkpoint written for other tables, which
// only --from-checkpoint (or --gtid) asks for: either would let outboxd resume where nobody
// chose to (a lost checkpoint's position unexamined, an added table's older rows skipped).
func TestAcceptLayoutAloneKeepsTombstoneAndScope(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, "")
	cfgPath := writeCfg(t, o)
	path := filepath.Join(o.Dir, "checkpoint.json")
	for name, c := range untrusted(w) {
		t.Run(name, func(t *testing.T) {
			writeFileCheckpoint(t, path, c)
			code, out := runBinary(t, "checkpoint", "set", "--config", cfgPath, "--accept-layout")
			if code == 0 || !strings.Contains(out, "--from-checkpoint") {
				t.Fatalf("checkpoint set --accept-layout on a %s: exit %d, want a refusal naming --from-checkpoint:\n%s", name, code, out)
			}
			got, err := checkpoint.Read(path)
			if err != nil || got == nil || !reflect.DeepEqual(got.Scope, c.Scope) {
				t.Fatalf("checkpoint after the refused set: %+v, %v; want the scope %+v kept", got, err, c.Scope)
			}
		})
	}
}

// untrusted are the checkpoints a config relaying w's outbox_event must not resume from: a
// tombstone of its own and one written for other tables.
func untrusted(w *world) map[string]checkpoint.Checkpoint {
	base := checkpoint.Checkpoint{Flavor: "mariadb", GTIDSet: w.position()}
	return map[string]checkpoint.Checkpoint{
		"tombstone": checkpoint.Tombstone(withScope(base, []string{w.schema + ".outbox_event"}), "test", "removed by hand", time.Now()),
		"scope":     withScope(base, []string{w.schema + ".other"}),
	}
}

// writeFileCheckpoint writes c as the file store's checkpoint at path.
func writeFileCheckpoint(t *testing.T, path string, c checkpoint.Checkpoint) {
	t.Helper()
	s, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Save(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

func withScope(c checkpoint.Checkpoint, tables []string) checkpoint.Checkpoint {
	c.Scope = checkpoint.NewScope("test", tables)
	return c
}

// `run --from-gtid` chooses where to read, not which checkpoint to trust: on the file store it
// refuses a tombstone and a checkpoint written for other tables as the mysql store's claim
// does, leaving the file as it was, instead of writing over a lost checkpoint's last position
// or another config's checkpoint (`checkpoint set` is the way to replace either).
func TestFromGTIDFileStoreKeepsTombstoneAndScope(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "t")
	o := simpleCfg(t, w, kc, "")
	path := filepath.Join(o.Dir, "checkpoint.json")
	for name, c := range untrusted(w) {
		t.Run(name, func(t *testing.T) {
			writeFileCheckpoint(t, path, c)
			err := startRelay(t, o, daemon.Options{FromGTID: w.position()}).waitExit(t, 30*time.Second)
			if !errors.Is(err, checkpoint.ErrCheckpointLost) && !errors.Is(err, checkpoint.ErrScopeMismatch) ||
				!strings.Contains(err.Error(), "checkpoint set") {
				t.Fatalf("run --from-gtid on a %s: %v, want a refusal naming checkpoint set", name, err)
			}
			got, err := checkpoint.Read(path)
			if err != nil || got == nil || !reflect.DeepEqual(got.Scope, c.Scope) || got.GTIDSet != c.GTIDSet {
				t.Fatalf("checkpoint after the refused run: %+v, %v; want %+v kept", got, err, c)
			}
		})
	}
}
