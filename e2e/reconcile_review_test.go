package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/daemon"
)

// A window whose bounds lie outside what FROM_UNIXTIME takes (before 1970, after 2038 on
// MariaDB 10.11), such as "everything": --since 1960-01-01 --until 2100-01-01. The rows in it
// are checked (or reconcile refuses the bounds), never a silent "checked 0, missing 0".
func TestReconcileWideWindow(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc := kafkaCluster(t, "orders")
	o := simpleCfg(t, w, kc, w.position())
	r := startRelay(t, o, daemon.Options{})
	for i := range 3 {
		id := fmt.Sprintf("w%d", i)
		w.commit(row{EventID: id, Key: "k", Topic: "orders", Payload: []byte(id)})
	}
	cons := newConsumer(t, kc, "orders")
	cons.waitFor(3, 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatalf("relay: %v\n%s", err, r.logs)
	}
	cfg := reconcileCfg(t, o, "r.yaml")
	for _, tc := range []struct{ since, until time.Time }{
		{time.Now().Add(-time.Hour), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)},
		{time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), time.Now().Add(time.Hour)},
	} {
		code, rep, out := runReconcile(t, cfg, tc.since, tc.until)
		if code != 0 || rep.Checked != 3 || rep.Found != 3 {
			t.Fatalf("window %s .. %s: exit %d, report %+v, want the 3 rows checked and found\n%s", tc.since, tc.until, code, rep, out)
		}
	}
}
