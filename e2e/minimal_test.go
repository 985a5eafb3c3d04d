package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/testenv/mariadb"
)

// With binlog_row_metadata=MINIMAL the column names come from information_schema, which
// describes the table as it is now. Rows written before an ALTER TABLE that keeps the column
// count but moves a column, and read after it, would be mapped onto the wrong columns: outboxd
// compares the row's column types with information_schema's and stops, naming the column, with
// the rows before delivered and the checkpoint before that row.
func TestMinimalMetadataAlteredTableStops(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{RowMetadata: "FULL"})
	if err := srv.Restart(context.Background(), mariadb.Options{RowMetadata: "MINIMAL"}); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, srv)
	// MINIMAL is refused unless the operator accepts its risk.
	r := startRelayed(t, w, "first", func(o *cfgOpts) { o.Source = "  allow_minimal_row_metadata: true\n" })
	o, cfgPath, p, c, first := r.o, r.cfgPath, r.p, r.cons, r.gtid
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("graceful stop exited %d:\n%s", code, p.output())
	}

	// While outboxd is down: a row, then payload moves before biz_key (same column count).
	old := w.commit(row{EventID: "old", Key: "k2", Topic: "t", Payload: []byte("p2")})
	w.exec("ALTER TABLE " + w.schema + ".outbox_event MODIFY payload LONGBLOB NULL AFTER event_id")
	w.commit(row{EventID: "new", Key: "k3", Topic: "t", Payload: []byte("p3")})

	// A checkpoint without recorded layouts (as an older outboxd wrote it) skips the start-up
	// layout check (layout_test.go) once: the row's types are what stops outboxd then.
	if code, out := runBinary(t, "checkpoint", "set", "--config", cfgPath, "--gtid", first); code != 0 {
		t.Fatalf("checkpoint set exited %d:\n%s", code, out)
	}
	code, out := runBinary(t, "run", "--config", cfgPath)
	if code != 1 {
		t.Fatalf("outboxd exited %d reading a row from before the ALTER, want 1:\n%s", code, out)
	}
	for _, want := range []string{"outbox table " + w.schema + ".outbox_event", "transaction " + old,
		"column 3 is VARCHAR/VARBINARY of 256 bytes in the binlog", "`payload` longblob", "binlog_row_metadata=FULL", "records no column layout"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := readCheckpoint(t, o.Dir); got != first {
		t.Errorf("checkpoint %q, want %q (before the row from before the ALTER)", got, first)
	}
	if ids := eventIDs(c.settle(300 * time.Millisecond)); strings.Join(ids, ",") != "first" {
		t.Errorf("delivered %v, want only the row before", ids)
	}
}
