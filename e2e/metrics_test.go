package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outboxd/outboxd/daemon"
)

// series returns the value of the one series of name whose labels are exactly want (a
// histogram's sample count), and whether it exists.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		l := admLabels(m)
		if len(l) != len(want) {
			continue
		}
		for k, v := range want {
			if l[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// The /metrics of a real outboxd (in process, real MariaDB, kfake, the admin listener): every
// configured table's series, both routes (one named, one by its index), the in-flight limits and
// the reconnect counter exist at 0 before any row; after traffic the deliveries and dead letters
// are counted per table and route, read→ack holds one observation per transaction delivered, and
// commit→ack none, since MariaDB's commit times are whole seconds; a lost binlog stream counts
// one reconnect.
func TestMetricsZeroSeriesAndPerTableCounts(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec(strings.Replace(fmt.Sprintf(outboxDDL, w.schema), ".outbox_event", ".outbox_audit", 1))
	// A user of this test alone, so its binlog dump thread can be told from other tests'.
	user := "metrics" + w.schema
	w.exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'")
	w.exec("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + user + "'@'%'")
	w.exec("GRANT SELECT ON " + w.schema + ".* TO '" + user + "'@'%'")
	t.Cleanup(func() { _, _ = w.db.Exec("DROP USER '" + user + "'@'%'") })

	kc := kafkaCluster(t, "order.created", "audit", "outbox.dead_letter")
	admin := admFreeAddr(t)
	o := simpleCfg(t, w, kc, w.position())
	o.User, o.Pass = user, "pw"
	events, audit := w.schema+".outbox_event", w.schema+".outbox_audit"
	o.Tables = []string{events, audit}
	o.Routes = fmt.Sprintf("  - name: orders\n    match: {table: %q, topic: \"order.*\"}\n    sink: main\n    topic: \"{topic}\"\n"+
		"  - match: {table: %q}\n    sink: main\n    topic: audit\n", events, audit)
	o.OnPoison = "dead_letter"
	o.DeadLetter = "{sink: main, topic: outbox.dead_letter}"
	o.Extra = fmt.Sprintf("admin: {listen: %q}\npipeline: {max_inflight_events: 5000, max_inflight_bytes: 3000000}\n", admin)
	r := startRelay(t, o, daemon.Options{Version: "e2e-test"})
	admWaitReady(t, admin, 200, 30*time.Second)

	// At start, before any row: the zero series.
	_, fams := admScrape(t, admin)
	zero := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"outboxd_events_read_total", map[string]string{"table": events}, 0},
		{"outboxd_events_read_total", map[string]string{"table": audit}, 0},
		{"outboxd_events_delivered_total", map[string]string{"sink": "main", "route": "orders"}, 0},
		{"outboxd_events_delivered_total", map[string]string{"sink": "main", "route": "1"}, 0},
		{"outboxd_events_delivered_total", map[string]string{"sink": "main", "route": "dead_letter"}, 0},
		{"outboxd_table_events_delivered_total", map[string]string{"table": events, "route": "orders"}, 0},
		{"outboxd_table_events_delivered_total", map[string]string{"table": events, "route": "dead_letter"}, 0},
		{"outboxd_table_events_delivered_total", map[string]string{"table": audit, "route": "1"}, 0},
		{"outboxd_table_events_delivered_total", map[string]string{"table": audit, "route": "dead_letter"}, 0},
		{"outboxd_table_dead_letters_total", map[string]string{"table": events, "route": "orders"}, 0},
		{"outboxd_table_dead_letters_total", map[string]string{"table": events, "route": "none"}, 0},
		{"outboxd_table_dead_letters_total", map[string]string{"table": audit, "route": "1"}, 0},
		{"outboxd_table_dead_letters_total", map[string]string{"table": audit, "route": "none"}, 0},
		{"outboxd_inflight_events_limit", map[string]string{}, 5000},
		{"outboxd_inflight_bytes_limit", map[string]string{}, 3000000},
		{"outboxd_source_reconnects_total", map[string]string{}, 0},
		{"outboxd_leader", map[string]string{}, 1},
		{"outboxd_fences_total", map[string]string{}, 0},
		{"outboxd_read_to_ack_seconds", map[string]string{}, 0},
		{"outboxd_commit_to_ack_seconds", map[string]string{}, 0},
		// The shared server never purges binlogs (binlog_expire_logs_seconds 0): no retention,
		// no time limit, sampled or not.
		{"outboxd_binlog_retention_seconds", map[string]string{}, 0},
		{"outboxd_binlog_retention_remaining_seconds", map[string]string{}, 0},
	}
	for _, z := range zero {
		if v, ok := series(fams, z.name, z.labels); !ok || v != z.want {
			t.Errorf("at start: %s%v = %v (present %v), want %v", z.name, z.labels, v, ok, z.want)
		}
	}
	// Bounded by the config: a route's series exist only for the tables its glob takes.
	if _, ok := series(fams, "outboxd_table_events_delivered_total", map[string]string{"table": events, "route": "1"}); ok {
		t.Errorf("a series for route 1 on %s, which its match.table never takes", events)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Traffic: 5 transactions of 2 rows on the named route, 3 of 1 row on route 1, one
	// unroutable row (dead-lettered), and one transaction without outbox rows.
	oc, ac, dl := newConsumer(t, kc, "order.created"), newConsumer(t, kc, "audit"), newConsumer(t, kc, "outbox.dead_letter")
	for i := range 5 {
		w.commit(row{EventID: fmt.Sprintf("o%da", i), Key: "k", Topic: "order.created", Payload: []byte("{}")},
			row{EventID: fmt.Sprintf("o%db", i), Key: "k", Topic: "order.created", Payload: []byte("{}")})
	}
	for i := range 3 {
		w.commitTo("outbox_audit", row{EventID: fmt.Sprintf("a%d", i), Key: "k", Topic: "whatever", Payload: []byte("{}")})
	}
	w.commit(row{EventID: "unroutable", Key: "k", Topic: "inventory.changed", Payload: []byte("{}")})
	w.commit()
	oc.waitFor(10, 30*time.Second)
	ac.waitFor(3, 30*time.Second)
	dl.waitForEvent("unroutable", 30*time.Second)

	const delivered = 5 + 3 + 1 // transactions with outbox rows
	admWaitFor(t, 20*time.Second, func() string {
		return "read_to_ack count " + fmt.Sprint(series(fams, "outboxd_read_to_ack_seconds", nil))
	}, func() bool {
		_, fams = admScrape(t, admin)
		v, _ := series(fams, "outboxd_read_to_ack_seconds", map[string]string{})
		return v >= delivered
	})
	after := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"outboxd_events_read_total", map[string]string{"table": events}, 11},
		{"outboxd_events_read_total", map[string]string{"table": audit}, 3},
		{"outboxd_events_delivered_total", map[string]string{"sink": "main", "route": "orders"}, 10},
		{"outboxd_events_delivered_total", map[string]string{"sink": "main", "route": "1"}, 3},
		{"outboxd_events_delivered_total", map[string]string{"sink": "main", "route": "dead_letter"}, 1},
		{"outboxd_table_events_delivered_total", map[string]string{"table": events, "route": "orders"}, 10},
		{"outboxd_table_events_delivered_total", map[string]string{"table": events, "route": "dead_letter"}, 1},
		{"outboxd_table_events_delivered_total", map[string]string{"table": audit, "route": "1"}, 3},
		{"outboxd_table_events_delivered_total", map[string]string{"table": audit, "route": "dead_letter"}, 0},
		{"outboxd_table_dead_letters_total", map[string]string{"table": events, "route": "none"}, 1},
		{"outboxd_table_dead_letters_total", map[string]string{"table": events, "route": "orders"}, 0},
		{"outboxd_table_dead_letters_total", map[string]string{"table": audit, "route": "none"}, 0},
		{"outboxd_dead_letters_total", map[string]string{"reason": "no_route"}, 1},
		{"outboxd_read_to_ack_seconds", map[string]string{}, delivered},
		// MariaDB's commit times are whole seconds: never observed.
		{"outboxd_commit_to_ack_seconds", map[string]string{}, 0},
		{"outboxd_source_reconnects_total", map[string]string{}, 0},
	}
	for _, a := range after {
		if v, ok := series(fams, a.name, a.labels); !ok || v != a.want {
			t.Errorf("after traffic: %s%v = %v (present %v), want %v", a.name, a.labels, v, ok, a.want)
		}
	}

	// The server drops the binlog stream: outboxd reconnects, and counts it.
	// TIME >= 1: outboxd's stream, not the retention sampler's dump of a few milliseconds.
	var ids []int64
	for range 50 {
		ids = ids[:0]
		rows, err := w.db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? AND COMMAND = 'Binlog Dump' AND TIME >= 1", user)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(ids) != 1 {
		t.Fatalf("binlog dump threads of %s: %v, want one", user, ids)
	}
	w.exec(fmt.Sprintf("KILL %d", ids[0]))
	admWaitFor(t, 30*time.Second, func() string { return "a counted reconnect" }, func() bool {
		_, fams = admScrape(t, admin)
		v, _ := series(fams, "outboxd_source_reconnects_total", map[string]string{})
		return v == 1
	})
	w.commitTo("outbox_audit", row{EventID: "after-reconnect", Key: "k", Topic: "x", Payload: []byte("{}")})
	ac.waitForEvent("after-reconnect", 30*time.Second)
	admWaitFor(t, 20*time.Second, func() string { return "the delivery after the reconnect counted" }, func() bool {
		_, fams = admScrape(t, admin)
		v, _ := series(fams, "outboxd_table_events_delivered_total", map[string]string{"table": audit, "route": "1"})
		n, _ := series(fams, "outboxd_read_to_ack_seconds", map[string]string{})
		return v == 4 && n == delivered+1
	})
	if t.Failed() {
		t.Logf("logs:\n%s", r.logText())
	}
}
