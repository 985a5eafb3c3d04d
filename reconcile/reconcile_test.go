package reconcile

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// fakeReader holds the event ids each topic has, one entry per copy.
type fakeReader struct {
	topics map[string][]string
	asked  []string
}

func (f *fakeReader) Count(_ context.Context, topic string, _, _ time.Time, counts map[string]int) error {
	f.asked = append(f.asked, topic)
	for _, id := range f.topics[topic] {
		if _, ok := counts[id]; ok {
			counts[id]++
		}
	}
	return nil
}

func (f *fakeReader) Close() error { return nil }

// rowsSource is a rowSource over rows held by the test.
type rowsSource []row

func (rs rowsSource) read(_ context.Context, since, until time.Time, limit int, fn func(row)) (bool, error) {
	n := 0
	for _, r := range rs {
		if r.createdAt.Before(since) || !r.createdAt.Before(until) {
			continue
		}
		if n++; limit > 0 && n > limit {
			return true, nil
		}
		fn(r)
	}
	return false, nil
}

// evaluate checks rows as Run checks a table's.
func evaluate(ctx context.Context, cfg *config.Config, rt *router.Router, rows []row, opts Options) (Report, error) {
	return check(ctx, cfg, rt, rowsSource(rows), opts)
}

func outboxRow(id, topic string, at time.Time) row {
	f := func(s string) binlog.Field { return binlog.Field{Bytes: []byte(s)} }
	return row{table: "shop.outbox_event", createdAt: at, ev: binlog.Event{
		Schema: "shop", Table: "outbox_event", EventID: f(id), Key: f("k"), Topic: f(topic),
		Payload: binlog.Field{Bytes: []byte{}}, EventType: binlog.Field{Null: true}, Headers: binlog.Field{Null: true},
	}}
}

func testConfig(t *testing.T, onPoison string) *config.Config {
	t.Helper()
	cfg := &config.Config{
		Tables: []config.Table{{Table: "shop.outbox_event"}},
		Sinks:  map[string]config.Sink{"main": {Type: config.SinkKafka, Brokers: []string{"127.0.0.1:1"}}},
		Routes: []config.Route{
			{Match: config.Match{Topic: "order.*"}, Sink: "main", Topic: "orders"},
			{Match: config.Match{Topic: "pay.*"}, Sink: "main", Topic: "{topic}"},
		},
		OnPoison: onPoison,
	}
	if onPoison == config.OnPoisonDeadLetter {
		cfg.DeadLetter = &config.DeadLetter{Sink: "main", Topic: "dlq"}
	}
	cfg.ApplyDefaults()
	return cfg
}

// The accounting of one window: every row is found, dead-lettered or missing exactly once; an
// event id found more times than it has rows is a duplicate; repeated ids need as many copies
// as rows; a row whose topic lacks it is looked for in the dead-letter topic under
// on_poison: dead_letter, and so is a poison row; under stop a poison row is missing with its
// reason. Each destination is read once.
func TestEvaluate(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rows := []row{
		outboxRow("a", "order.created", at),
		outboxRow("b", "order.created", at.Add(time.Second)),
		outboxRow("c", "order.paid", at.Add(2*time.Second)), // missing
		outboxRow("d", "pay.ok", at.Add(3*time.Second)),     // duplicated
		outboxRow("e", "pay.ok", at.Add(4*time.Second)),     // two rows, one copy
		outboxRow("e", "pay.ok", at.Add(5*time.Second)),
		outboxRow("f", "order.created", at.Add(6*time.Second)), // rejected by the broker: in the dlq
		outboxRow("g", "nowhere", at.Add(7*time.Second)),       // no route
	}
	w := Window{Since: at, Until: at.Add(time.Minute)}
	for _, c := range []struct {
		onPoison     string
		missing      []string
		deadLettered int
	}{
		{config.OnPoisonStop, []string{"c", "e", "f", "g"}, 0},
		{config.OnPoisonDeadLetter, []string{"c", "e"}, 1},
	} {
		cfg := testConfig(t, c.onPoison)
		rt, err := router.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fr := &fakeReader{topics: map[string][]string{
			"orders": {"a", "b", "x"},
			"pay.ok": {"d", "d", "e"},
			"dlq":    {"f"},
		}}
		if c.onPoison == config.OnPoisonDeadLetter {
			fr.topics["dlq"] = append(fr.topics["dlq"], "g")
		}
		rep, err := evaluate(context.Background(), cfg, rt, rows, Options{Window: w, Before: time.Minute, After: time.Minute, Readers: map[string]Reader{"main": fr}})
		if err != nil {
			t.Fatal(err)
		}
		wantFound := len(rows) - len(c.missing) - c.deadLettered
		if c.onPoison == config.OnPoisonDeadLetter {
			wantFound = 5 // a, b, d, one e, and g found at its dead-letter destination
		}
		if got := eventIDsOfReport(rep.MissingEvents); !slices.Equal(got, c.missing) {
			t.Errorf("%s: missing %v, want %v", c.onPoison, got, c.missing)
		}
		if rep.Checked != len(rows) || rep.Found+rep.DeadLettered+rep.Missing != rep.Checked || rep.DeadLettered != c.deadLettered || rep.Found != wantFound {
			t.Errorf("%s: report %+v, want found %d, dead_lettered %d", c.onPoison, rep, wantFound, c.deadLettered)
		}
		if rep.Duplicated != 1 || rep.DuplicatedEvents[0].EventID != "d" || rep.DuplicatedEvents[0].Found != 2 {
			t.Errorf("%s: duplicated %+v", c.onPoison, rep.DuplicatedEvents)
		}
		if empty, _ := evaluate(context.Background(), cfg, rt, nil, Options{Window: w, Readers: map[string]Reader{"main": fr}}); empty.MissingEvents == nil || empty.DuplicatedEvents == nil {
			t.Errorf("an empty window's lists are nil (null in JSON): %+v", empty)
		}
		if !rep.From.Equal(at.Add(-time.Minute)) || !rep.To.Equal(at.Add(2*time.Minute)) {
			t.Errorf("%s: read range %v .. %v", c.onPoison, rep.From, rep.To)
		}
		for _, e := range rep.MissingEvents {
			if e.EventID == "g" && (e.Reason == "" || e.Topic != "") {
				t.Errorf("poison row g: %+v, want a reason and no destination", e)
			}
			if e.EventID == "e" && (e.Rows != 2 || e.Found != 1) {
				t.Errorf("e: %+v, want rows 2, found 1", e)
			}
		}
		seen := map[string]int{}
		for _, tp := range fr.asked {
			seen[tp]++
		}
		for tp, n := range seen {
			if n > 1 && tp != "dlq" {
				t.Errorf("%s: topic %s read %d times", c.onPoison, tp, n)
			}
		}
	}
}

func eventIDsOfReport(es []Event) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.EventID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// The README's JSON list entries: sink and topic left out only for a row without a
// destination, reason only for it.
func TestEventJSONFields(t *testing.T) {
	for _, tc := range []struct {
		ev         Event
		want, none []string
	}{
		{Event{EventID: "a", Table: "s.t", Sink: "main", Topic: "orders", Rows: 1}, []string{`"sink":"main"`, `"topic":"orders"`, `"rows":1`, `"found":0`, `"created_at":`}, []string{`"reason"`}},
		{Event{EventID: "g", Table: "s.t", Rows: 1, Reason: "poison"}, []string{`"reason":"poison"`}, []string{`"sink"`, `"topic"`}},
	} {
		b, err := json.Marshal(tc.ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %s", b, w)
			}
		}
		for _, w := range tc.none {
			if strings.Contains(string(b), w) {
				t.Errorf("%s has %s", b, w)
			}
		}
	}
}

// A window counted again after its slices is complete only when it holds the rows checked:
// more rows are unchecked; as many or fewer, but others (rows deleted meanwhile hiding rows
// committed into it), is changed.
func TestCompleteness(t *testing.T) {
	ids := func(ss ...string) (n int, d uint32) {
		for _, s := range ss {
			n++
			d += rowDigest(binlog.Field{Bytes: []byte(s)})
		}
		return n, d
	}
	checkedN, checkedD := ids("a", "b", "c")
	for _, tc := range []struct {
		name          string
		after         []string
		unchecked     int
		changed, done bool
	}{
		{"the same rows", []string{"a", "b", "c"}, 0, false, true},
		{"one committed into it", []string{"a", "b", "c", "d"}, 1, false, false},
		{"one deleted, one committed: as many rows, other ones", []string{"a", "b", "d"}, 0, true, false},
		{"two deleted, one committed", []string{"a", "d"}, 0, true, false},
		{"one deleted", []string{"a", "b"}, 0, true, false},
	} {
		n, d := ids(tc.after...)
		unchecked, changed := completeness(checkedN, checkedD, n, d)
		rep := Report{Unchecked: unchecked, Changed: changed}
		if unchecked != tc.unchecked || changed != tc.changed || rep.Complete() != tc.done {
			t.Errorf("%s: unchecked %d changed %v complete %v; want %d %v %v", tc.name, unchecked, changed, rep.Complete(), tc.unchecked, tc.changed, tc.done)
		}
	}
	// NULL and absent event ids add nothing, as SUM(CRC32(NULL)) does not.
	if rowDigest(binlog.Field{Null: true}) != 0 || rowDigest(binlog.Field{Missing: true}) != 0 {
		t.Error("a NULL or absent event id has a digest")
	}
}
