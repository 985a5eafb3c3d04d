package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestReadRange(t *testing.T) {
	for _, c := range []struct {
		name               string
		start, end, last   int64
		ok                 bool
		wantStart, wantEnd int64
	}{
		{"window inside the log", 10, 20, 30, true, 10, 20},
		{"no record after the window", 10, -1, 30, true, 10, 30},
		{"no record at or after from", -1, -1, 30, false, 0, 0},
		{"from at the log end", 30, -1, 30, false, 0, 0},
		{"empty window", 10, 10, 30, false, 0, 0},
		{"end past the log end is clamped", 10, 40, 30, true, 10, 30},
		{"empty partition", -1, -1, 0, false, 0, 0},
	} {
		r, ok := readRange(3, c.start, c.end, c.last)
		if ok != c.ok || (ok && (r.start != c.wantStart || r.end != c.wantEnd || r.partition != 3)) {
			t.Errorf("%s: readRange(%d, %d, %d) = %+v, %v", c.name, c.start, c.end, c.last, r, ok)
		}
	}
}

// The Kafka reader against kfake, records produced by a real client with the times outboxd
// gives them (commit times): it counts the window's records in every partition, copies
// included, and not those stamped before from or at or after to; an unknown topic is empty.
func TestKafkaReaderWindow(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "T"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	from, to := base.Add(time.Minute), base.Add(2*time.Minute)
	var recs []*kgo.Record
	add := func(id string, at time.Time, part int32) {
		recs = append(recs, &kgo.Record{Topic: "T", Partition: part, Timestamp: at, Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("x")}, {Key: "event_id", Value: []byte(id)}}})
	}
	for p := int32(0); p < 3; p++ {
		add(fmt.Sprintf("before%d", p), from.Add(-time.Millisecond), p)
		for i := range 40 {
			add(fmt.Sprintf("in%d-%d", p, i), from.Add(time.Duration(i)*time.Second), p)
		}
	}
	add("in1-5", from.Add(50*time.Second), 2) // a copy, in another partition
	for p := int32(0); p < 3; p++ {
		add(fmt.Sprintf("after%d", p), to, p)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{"absent": 0}
	for _, r := range recs {
		counts[string(r.Headers[1].Value)] = 0
	}
	r := NewKafkaReader(KafkaConfig{Brokers: c.ListenAddrs(), Timeout: 5 * time.Second})
	defer r.Close()
	if err := r.Count(context.Background(), "T", from, to, counts); err != nil {
		t.Fatal(err)
	}
	for id, n := range counts {
		want := 0
		switch {
		case id == "in1-5":
			want = 2
		case strings.HasPrefix(id, "in"):
			want = 1
		}
		if n != want {
			t.Errorf("%s counted %d, want %d", id, n, want)
		}
	}
	if err := r.Count(context.Background(), "NO_SUCH_TOPIC", from, to, counts); err != nil {
		t.Fatalf("unknown topic: %v", err)
	}
}

// Under exactly-once, aborted transactions leave records in the topics: the reader counts only
// committed records (and non-transactional ones), never an aborted one, and stops at the last
// stable offset without waiting for a transaction still open.
func TestKafkaReaderReadCommitted(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "T"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// Commit and abort markers carry the broker's time of the EndTxn: the window holds now.
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	from, to := base, base.Add(time.Hour)
	rec := func(id string, i int) *kgo.Record {
		return &kgo.Record{Topic: "T", Timestamp: base.Add(time.Duration(i) * time.Second), Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}}
	}
	txn := func(id string, commit kgo.TransactionEndTry, recs ...*kgo.Record) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(id))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn("outboxd-a", kgo.TryCommit, rec("committed1", 1), rec("committed2", 2))
	txn("outboxd-a", kgo.TryAbort, rec("aborted1", 3), rec("committed1", 4)) // a resend, aborted
	plain, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.ProduceSync(ctx, rec("plain", 5)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn("outboxd-a", kgo.TryAbort, rec("aborted2", 6)) // the newest records of the partition are aborted ones
	// A transaction left open: past the last stable offset, not read.
	open, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("outboxd-b"))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := open.ProduceSync(ctx, rec("open", 7)).FirstErr(); err != nil {
		t.Fatal(err)
	}

	r := NewKafkaReader(KafkaConfig{Brokers: c.ListenAddrs(), Timeout: 5 * time.Second})
	defer r.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts := map[string]int{"committed1": 0, "committed2": 0, "plain": 0, "aborted1": 0, "aborted2": 0, "open": 0}
	if err := r.Count(cctx, "T", from, to, counts); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"committed1": 1, "committed2": 1, "plain": 1, "aborted1": 0, "aborted2": 0, "open": 0}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counted %v, want %v (aborted or open records counted, or committed ones missed)", counts, want)
	}
	var ids []string
	if err := r.ReadTopic(cctx, "T", func(_, value []byte) error { ids = append(ids, string(value)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Errorf("ReadTopic returned %d records, want the 3 committed ones", len(ids))
	}
}
