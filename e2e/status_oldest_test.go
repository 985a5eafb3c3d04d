package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/daemon"
)

// With the broker down, /status names the event that holds the checkpoint (table, id,
// event_id, topic, sink, GTID) with an age that grows, `outboxd status` prints it, and once
// the broker is back and the event is acknowledged /status names none.
func TestStatusNamesTheOldestUnacknowledgedEvent(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	kc, port, dataDir := restartableKafka(t, "t")
	addr := admFreeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.Extra = fmt.Sprintf("admin: {listen: %q}\n", addr)
	cfgPath := writeCfg(t, o)
	r := startRelay(t, o, daemon.Options{Version: "e2e-test"})
	admWaitReady(t, addr, http.StatusOK, 20*time.Second)

	status := func() admin.Status { return admStatus(t, addr) }

	// Delivered and acknowledged: nothing to name.
	w.commit(row{EventID: "ok1", Key: "k", Topic: "t", Payload: []byte("x")})
	newConsumer(t, kc, "t").waitForEvent("ok1", 20*time.Second)
	var st admin.Status
	admWaitFor(t, 10*time.Second, func() string { return fmt.Sprintf("oldest %+v", st.OldestUnacked) }, func() bool {
		st = status()
		return st.OldestUnacked == nil && st.InFlight.Events == 0
	})

	// The broker goes down; two transactions wait. The older one is named.
	kc.Close()
	stuckGTID := w.commit(row{EventID: "stuck1", Key: "k1", Topic: "t", Payload: []byte("x")})
	w.commit(row{EventID: "stuck2", Key: "k2", Topic: "t", Payload: []byte("y")})
	admWaitFor(t, 10*time.Second, func() string { return fmt.Sprintf("oldest %+v", st.OldestUnacked) }, func() bool {
		st = status()
		return st.OldestUnacked != nil && st.InFlight.Events == 2
	})
	first := *st.OldestUnacked
	var id int64
	if err := w.db.QueryRow("SELECT id FROM " + w.schema + ".outbox_event WHERE event_id = 'stuck1'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if first.EventID != "stuck1" || first.Table != w.schema+".outbox_event" || first.ID != fmt.Sprint(id) ||
		first.Topic != "t" || first.Sink != "main" || first.GTID != stuckGTID || first.ReadAt.IsZero() {
		t.Fatalf("oldest unacknowledged event %+v, want stuck1 (id %d, gtid %s) in %s.outbox_event for t on main", first, id, stuckGTID, w.schema)
	}
	time.Sleep(1200 * time.Millisecond)
	st = status()
	if o := st.OldestUnacked; o == nil || o.EventID != "stuck1" || o.AgeSeconds < first.AgeSeconds+1 {
		t.Fatalf("a second later the oldest is %+v; want stuck1 older than %.2fs by a second", o, first.AgeSeconds)
	}

	// `outboxd status` prints it.
	code, out := runBinary(t, "status", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("outboxd status exit %d:\n%s", code, out)
	}
	if want := fmt.Sprintf(`oldest       event_id "stuck1" (%s.outbox_event id %d, gtid %s) for main topic t, read `, w.schema, id, stuckGTID); !strings.Contains(out, want) {
		t.Errorf("outboxd status lacks %q:\n%s", want, out)
	}

	// The broker is back: both are delivered and nothing is named any more.
	restartKafka(t, port, dataDir)
	admWaitFor(t, 30*time.Second, func() string { return fmt.Sprintf("oldest %+v", st.OldestUnacked) }, func() bool {
		st = status()
		return st.OldestUnacked == nil && st.InFlight.Events == 0
	})
	if err := r.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
}
