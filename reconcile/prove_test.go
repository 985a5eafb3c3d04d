package reconcile

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// Only rows found at their route's topic, as often as the slice has rows with their id, are
// proven: not a row found only on the dead-letter topic, not a poison row routed there (found
// there too), not the undelivered twin of a duplicated id, not a row missing. Ids are bytes:
// "A" is not "a". The report counts as Run's.
func TestProvenRows(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var rows []row
	for i, id := range []string{"a", "b", "e", "e", "f", "g", "A"} {
		topic := "order.created"
		if id == "g" {
			topic = "nowhere"
		}
		r := outboxRow(id, topic, at.Add(time.Duration(i)*time.Second))
		r.pk = []any{int64(i)}
		rows = append(rows, r)
	}
	cfg := testConfig(t, config.OnPoisonDeadLetter)
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rd := &fakeReader{topics: map[string][]string{"orders": {"a", "b", "e"}, "dlq": {"f", "g", "a"}}}
	var got []int64
	rep, err := check(context.Background(), cfg, rt, rowsSource(rows), Options{
		Window: Window{Since: at, Until: at.Add(time.Minute)}, Readers: map[string]Reader{"main": rd},
		proven: func(_ context.Context, ps []ProvenRow) error {
			for _, p := range ps {
				got = append(got, p.PK[0].(int64))
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("proven rows %v, want 0 (a) and 1 (b)", got)
	}
	if rep.Checked != 7 || rep.Missing != 2 || rep.DeadLettered != 1 {
		t.Fatalf("report %+v", rep)
	}
}

// A message counts for Prove only when the table it names in outbox_table is the one asked
// for (case-insensitively, as the relay matches table names); without a table, any counts.
func TestTallyTable(t *testing.T) {
	counts := map[string]int{"1": 0}
	tl := tally{table: "shop.outbox_a", counts: counts}
	tl.add("1", "shop.outbox_b")
	tl.add("1", "")
	tl.add("2", "shop.outbox_a")
	if counts["1"] != 0 || len(counts) != 1 {
		t.Fatalf("another table's message counted: %v", counts)
	}
	tl.add("1", "Shop.Outbox_A")
	tally{counts: counts}.add("1", "shop.outbox_b")
	if counts["1"] != 2 {
		t.Fatalf("counts %v, want 2", counts)
	}
}
