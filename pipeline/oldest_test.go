package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// oldestItem is an item of row id (event_id "e<id>") in shop.outbox for topic on sink main.
func oldestItem(e *entry, id, topic string) item {
	ev := &binlog.Event{Schema: "shop", Table: "outbox", ID: id, EventID: binlog.Field{Bytes: []byte("e" + id)}}
	return item{ev: ev, msg: &sink.Message{Topic: topic}, sink: "main", size: 1, entry: e}
}

// oldestEvent names the first event of the oldest transaction with unacknowledged events:
// transactions without events are passed over, a transaction streamed in pieces names its
// latest unacknowledged piece, and an entry keeps no row once all its events are acknowledged.
func TestTrackerOldestEvent(t *testing.T) {
	tr := newTracker(gtid.Empty(gtid.MariaDB), 100, 1<<20)
	if _, ok := tr.oldestEvent(); ok {
		t.Fatal("oldestEvent reports an event on an empty tracker")
	}
	t0 := time.Unix(1700000000, 0)
	// A transaction on no outbox table, still before an unfinished head: it has no event.
	empty := tr.begin("0-1-1", t0, t0)
	streamed := tr.begin("0-1-2", t0.Add(time.Second), t0.Add(2*time.Second))
	piece1 := []item{oldestItem(streamed, "1", "orders"), oldestItem(streamed, "2", "orders")}
	tr.extend(empty, nil)
	tr.extend(streamed, piece1)
	later := tr.begin("0-1-3", t0.Add(3*time.Second), t0.Add(4*time.Second))
	tr.extend(later, []item{oldestItem(later, "3", "invoices")})
	tr.finish(later, "bin.1", 30)

	want := OldestEvent{Table: "shop.outbox", ID: "1", EventID: "e1", Topic: "orders", Sink: "main",
		GTID: "0-1-2", CommitTime: t0.Add(time.Second), ReadAt: t0.Add(2 * time.Second)}
	if got, ok := tr.oldestEvent(); !ok || got != want {
		t.Fatalf("oldestEvent = %+v, %v; want %+v", got, ok, want)
	}
	// Its first event acknowledged, the second not: still this transaction, named by its first.
	tr.ack(piece1[:1])
	if got, _ := tr.oldestEvent(); got != want {
		t.Fatalf("after one ack: %+v, want %+v", got, want)
	}
	// The whole first piece acknowledged, the transaction not finished: it holds no row, and
	// the oldest unacknowledged event is the later transaction's.
	tr.ack(piece1[1:])
	if streamed.first != (firstItem{}) {
		t.Fatalf("an entry with nothing pending still holds %+v", streamed.first)
	}
	if got, _ := tr.oldestEvent(); got.EventID != "e3" || got.Topic != "invoices" || got.GTID != "0-1-3" {
		t.Fatalf("after the first piece: %+v, want e3 of 0-1-3", got)
	}
	// Its next piece is named once it arrives.
	piece2 := []item{oldestItem(streamed, "4", "orders")}
	tr.extend(streamed, piece2)
	if got, _ := tr.oldestEvent(); got.EventID != "e4" || got.GTID != "0-1-2" {
		t.Fatalf("after the second piece: %+v, want e4 of 0-1-2", got)
	}
	tr.finish(empty, "bin.1", 10)
	tr.finish(streamed, "bin.1", 20)
	tr.ack(piece2)
	tr.ack([]item{{entry: later, size: 1}})
	if got, ok := tr.oldestEvent(); ok {
		t.Fatalf("everything acknowledged, oldestEvent = %+v", got)
	}
	if cp, _, _ := tr.snapshot(); cp.GTIDSet != "0-1-3" {
		t.Fatalf("checkpoint %q, want 0-1-3", cp.GTIDSet)
	}
}

// A running pipeline whose broker does not answer names the blocked transaction's first row,
// with the topic its message goes to; once the broker acknowledges, it names none.
func TestPipelineOldestEventWhileTheBrokerHangs(t *testing.T) {
	s := &memSink{block: make(chan struct{})}
	p := newTestPipeline(t, s, &memSaver{}, "")
	in := make(chan *binlog.Txn, 2)
	first := txn(1, "a:1@orders", "b:2")
	first.Events[0].ID = "101"
	in <- txn(0) // a transaction with no outbox rows, acknowledged at once
	in <- first
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, in) }()
	var got OldestEvent
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var ok bool
		if got, ok = p.OldestEvent(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("OldestEvent names nothing while the broker hangs")
		}
	}
	if got.Table != "shop.outbox_event" || got.ID != "101" || got.EventID != "1" || got.Topic != "orders" || got.Sink != "main" || got.GTID != "0-1-1" {
		t.Fatalf("OldestEvent = %+v, want event 1 (id 101) of 0-1-1 for orders on main", got)
	}
	close(s.block)
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, ok := p.OldestEvent(); ok {
		t.Fatalf("everything acknowledged, OldestEvent = %+v", got)
	}
}

// A rolled-back XA's held rows are dropped by discard: its entry, which may wait behind the
// head for long, keeps no row alive, as an acknowledged one does not.
func TestTrackerDiscardKeepsNoRow(t *testing.T) {
	tr := newTracker(gtid.Empty(gtid.MariaDB), 100, 1<<20)
	t0 := time.Unix(1700000000, 0)
	head := tr.begin("0-1-1", t0, t0)
	tr.extend(head, []item{oldestItem(head, "1", "orders")})
	x := tr.begin("0-1-2", t0, t0)
	held := []item{oldestItem(x, "2", "orders"), oldestItem(x, "3", "orders")}
	if err := tr.admitHeld(context.Background(), "0-1-2", len(held), 2, 0); err != nil {
		t.Fatal(err)
	}
	tr.extend(x, held)
	tr.discard(x, len(held), 2)
	tr.finish(x, "bin.1", 20)
	if x.first != (firstItem{}) {
		t.Fatalf("a rolled-back XA's entry still holds %+v", x.first)
	}
	if got, _ := tr.oldestEvent(); got.EventID != "e1" {
		t.Fatalf("oldestEvent = %+v, want e1 of the head", got)
	}
}
