package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/reconcile"
)

// idsReader is a broker holding one copy of every id in have, stamped at any time: it records
// the most event ids one Count was asked about (the rows reconcile held at once).
type idsReader struct {
	have  map[string]bool
	peak  int
	calls int
}

func (r *idsReader) Count(_ context.Context, _ string, _, _ time.Time, counts map[string]int) error {
	r.calls++
	r.peak = max(r.peak, len(counts))
	for id := range counts {
		if r.have[id] {
			counts[id]++
		}
	}
	return nil
}

func (r *idsReader) Close() error { return nil }

// Reconcile reads the tables slice by slice with real MariaDB queries: with SliceRows 500,
// 4,000 rows over ten minutes in two tables plus 800 rows sharing one created_at are all
// checked, no broker read is asked about more than 500 ids (except the 800 of one instant,
// which cannot be split), and the rows without a message are exactly the missing ones.
func TestReconcileSlicesMariaDB(t *testing.T) {
	w := newWorld(t, sharedServer(t))
	w.exec(fmt.Sprintf(strings.Replace(outboxDDL, "outbox_event", "outbox_two", 1), w.schema))
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rd := &idsReader{have: map[string]bool{}}
	insert := func(table string, ids []string, ats []time.Time) {
		var vals []string
		var args []any
		for i, id := range ids {
			vals = append(vals, "(?, 'k', 'orders', 'p', FROM_UNIXTIME(?))")
			args = append(args, id, fmt.Sprintf("%d.%06d", ats[i].Unix(), ats[i].Nanosecond()/1000))
		}
		w.exec("INSERT INTO "+w.schema+"."+table+" (event_id, biz_key, topic, payload, created_at) VALUES "+strings.Join(vals, ","), args...)
	}
	total, missing := 0, 0
	for _, table := range []string{"outbox_event", "outbox_two"} {
		for chunk := range 4 {
			var ids []string
			var ats []time.Time
			for i := range 500 {
				n := chunk*500 + i
				id := fmt.Sprintf("%s-%d", table, n)
				ids = append(ids, id)
				ats = append(ats, base.Add(time.Duration(n)*300*time.Millisecond))
				if n%199 == 0 {
					missing++
				} else {
					rd.have[id] = true
				}
			}
			insert(table, ids, ats)
			total += len(ids)
		}
	}
	var ids []string
	var ats []time.Time
	instant := base.Add(7*time.Minute + 150*time.Millisecond) // off the other rows' 300 ms grid
	for i := range 800 {
		ids = append(ids, fmt.Sprintf("same-%d", i))
		ats = append(ats, instant)
		rd.have[ids[i]] = true
	}
	insert("outbox_event", ids, ats)
	total += len(ids)

	cfg := &config.Config{
		Tables: []config.Table{
			{Table: w.schema + ".outbox_event", Columns: config.Columns{CreatedAt: "created_at"}},
			{Table: w.schema + ".outbox_two", Columns: config.Columns{CreatedAt: "created_at"}},
		},
		Sinks:  map[string]config.Sink{"main": {Type: config.SinkKafka, Brokers: []string{"127.0.0.1:1"}}},
		Routes: []config.Route{{Sink: "main", Topic: "{topic}"}},
	}
	cfg.ApplyDefaults()
	rep, err := reconcile.Run(context.Background(), w.db, cfg, reconcile.Options{
		Window: reconcile.Window{Since: base, Until: base.Add(10 * time.Minute)}, Before: time.Minute, After: time.Minute,
		SliceRows: 500, Readers: map[string]reconcile.Reader{"main": rd}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != total || rep.Missing != missing || rep.Found != total-missing {
		t.Errorf("checked %d found %d missing %d, want %d, %d, %d", rep.Checked, rep.Found, rep.Missing, total, total-missing, missing)
	}
	if rd.peak != 800 {
		t.Errorf("a Count was asked about %d ids at most, want 800 (the one instant; every other slice at most 500)", rd.peak)
	}
	if rd.calls < 4000/500 {
		t.Errorf("%d broker reads for %d rows in slices of 500", rd.calls, total)
	}
}
