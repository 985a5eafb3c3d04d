package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// minimalRelayed starts outboxd on a MariaDB with binlog_row_metadata=MINIMAL (accepted by
// source.allow_minimal_row_metadata), relays one row "first" and stops outboxd gracefully.
func minimalRelayed(t *testing.T) (*world, relayed) {
	t.Helper()
	srv := mariadb.StartT(t, mariadb.Options{RowMetadata: "FULL"})
	if err := srv.Restart(context.Background(), mariadb.Options{RowMetadata: "MINIMAL"}); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, srv)
	r := startRelayed(t, w, "first", func(o *cfgOpts) { o.Source = "  allow_minimal_row_metadata: true\n" })
	return w, r
}

// swapKeyAndEventID moves biz_key before event_id: two VARCHAR(64) columns change places, which
// the TABLE_MAP's column types cannot show.
func swapKeyAndEventID(w *world) {
	w.exec("ALTER TABLE " + w.schema + ".outbox_event MODIFY biz_key VARCHAR(64) NULL AFTER id")
}

const swapDiff = "columns 2 and 3 swapped: was event_id, biz_key; now biz_key, event_id"

// recordsByID maps each delivered event id to its Kafka key.
func recordsByID(rs []*kgo.Record) map[string]string {
	m := map[string]string{}
	for _, r := range rs {
		m[header(r, "event_id")] = string(r.Key)
	}
	return m
}

// layoutOrder is the recorded column order of the outbox table in the checkpoint file.
func layoutOrder(t *testing.T, w *world, dir string) string {
	t.Helper()
	cp, err := checkpoint.Read(filepath.Join(dir, "checkpoint.json"))
	if err != nil || cp == nil {
		t.Fatalf("checkpoint: %v, %v", cp, err)
	}
	var names []string
	for _, c := range cp.Layouts[w.schema+".outbox_event"] {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

// A row written while outboxd is down, then an ALTER that swaps two same-typed columns: with
// MINIMAL metadata the row would be read with the new order (its key sent as the event id). The
// checkpoint records the layout it was saved under, so outboxd refuses to start, naming the
// table, the change and the way on, with nothing delivered and the checkpoint where it was.
func TestMinimalLayoutSwapStops(t *testing.T) {
	w, r := minimalRelayed(t)
	r.p.stop(t)

	w.commit(row{EventID: "old", Key: "k2", Topic: "t", Payload: []byte("p2")})
	swapKeyAndEventID(w)
	w.commit(row{EventID: "new", Key: "k3", Topic: "t", Payload: []byte("p3")})

	code, out := runBinary(t, "run", "--config", r.cfgPath)
	if code != 1 {
		t.Fatalf("outboxd exited %d after the layout changed under the checkpoint, want 1:\n%s", code, out)
	}
	for _, want := range []string{"outbox table " + w.schema + ".outbox_event: " + swapDiff,
		"gtid_set " + r.gtid, "outboxd checkpoint set --accept-layout", "binlog_row_metadata=FULL"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := readCheckpoint(t, r.o.Dir); got != r.gtid {
		t.Errorf("checkpoint %q, want %q", got, r.gtid)
	}
	if ids := eventIDs(r.cons.settle(300 * time.Millisecond)); strings.Join(ids, ",") != "first" {
		t.Errorf("delivered %v, want only the row before", ids)
	}
}

// The way on: no row was written between the checkpoint and the ALTER, which outboxd cannot
// know, so it stops; `checkpoint set --accept-layout` records the current layout and keeps the
// position, and the next start relays the rows after the ALTER with the right columns.
func TestMinimalLayoutAcceptLayout(t *testing.T) {
	w, r := minimalRelayed(t)
	r.p.stop(t)
	if got := layoutOrder(t, w, r.o.Dir); !strings.HasPrefix(got, "id,event_id,biz_key,") {
		t.Fatalf("recorded layout %s, want the table's order id,event_id,biz_key,...", got)
	}

	swapKeyAndEventID(w)
	g := w.commit(row{EventID: "new", Key: "k3", Topic: "t", Payload: []byte("p3")})
	if code, out := runBinary(t, "run", "--config", r.cfgPath); code != 1 || !strings.Contains(out, swapDiff) {
		t.Fatalf("outboxd exited %d, want 1 naming the swap:\n%s", code, out)
	}

	code, out := runBinary(t, "checkpoint", "set", "--config", r.cfgPath, "--accept-layout")
	if code != 0 {
		t.Fatalf("checkpoint set --accept-layout exited %d:\n%s", code, out)
	}
	if got := readCheckpoint(t, r.o.Dir); got != r.gtid {
		t.Errorf("checkpoint %q after --accept-layout, want the position kept: %q", got, r.gtid)
	}
	if got := layoutOrder(t, w, r.o.Dir); !strings.HasPrefix(got, "id,biz_key,event_id,") {
		t.Errorf("recorded layout %s after --accept-layout, want id,biz_key,event_id,...", got)
	}

	p := startBinary(t, "run", "--config", r.cfgPath)
	rs := r.cons.waitForEvent("new", 30*time.Second)
	if key := recordsByID(rs)["new"]; key != "k3" {
		t.Errorf("event new arrived with key %q, want k3 (ids: %v)", key, eventIDs(rs))
	}
	waitCheckpoint(t, r.o.Dir, g, 10*time.Second)
	p.stop(t)
}

// An ALTER that outboxd reads in the binlog while it runs moves the recorded layout with the
// checkpoint past it: a restart does not stop, and rows before and after arrive right.
func TestMinimalLayoutFollowsALTER(t *testing.T) {
	w, r := minimalRelayed(t)
	r.p.stop(t)
	p := startBinary(t, "run", "--config", r.cfgPath)
	w.commit(row{EventID: "before", Key: "k1", Topic: "t", Payload: []byte("p1")})
	// Read before the ALTER: a fresh stream reads information_schema at its first row.
	r.cons.waitForEvent("before", 30*time.Second)
	swapKeyAndEventID(w)
	g := w.commit(row{EventID: "after", Key: "k2", Topic: "t", Payload: []byte("p2")})
	r.cons.waitForEvent("after", 30*time.Second)
	waitCheckpoint(t, r.o.Dir, g, 10*time.Second)
	p.stop(t)
	if got := layoutOrder(t, w, r.o.Dir); !strings.HasPrefix(got, "id,biz_key,event_id,") {
		t.Errorf("recorded layout %s after the ALTER was relayed, want id,biz_key,event_id,...\n%s", got, p.output())
	}

	g = w.commit(row{EventID: "restart", Key: "k3", Topic: "t", Payload: []byte("p3")})
	p = startBinary(t, "run", "--config", r.cfgPath)
	rs := r.cons.waitForEvent("restart", 30*time.Second)
	waitCheckpoint(t, r.o.Dir, g, 10*time.Second)
	p.stop(t)
	keys := recordsByID(rs)
	for id, want := range map[string]string{"before": "k1", "after": "k2", "restart": "k3"} {
		if keys[id] != want {
			t.Errorf("event %s arrived with key %q, want %q (all: %v)", id, keys[id], want, keys)
		}
	}
}
