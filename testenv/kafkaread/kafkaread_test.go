package kafkaread

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceTxn produces ids (key k<i%2>, value "v-"+id, header event_id) in one transaction and
// commits it or aborts it.
func produceTxn(t *testing.T, cl *kgo.Client, commit bool, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		r := &kgo.Record{Topic: "t", Key: []byte(fmt.Sprintf("k%d", i%2)), Value: []byte("v-" + id + "\n\tx"),
			Headers: []kgo.RecordHeader{{Key: "other", Value: []byte("h")}, {Key: EventIDHeader, Value: []byte(id)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// Both readers see the records of committed transactions, once each, and nothing of an
// aborted one; values with newlines and tabs come back byte for byte.
func TestReadersSkipAbortedTransactions(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("kafkaread-test"),
		kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceTxn(t, cl, true, "a", "b", "c")
	produceTxn(t, cl, false, "x", "y")
	produceTxn(t, cl, true, "d")
	committed := []string{"a", "b", "c", "d"}

	check := func(who string, recs []Record) {
		t.Helper()
		tl := Count(recs, committed)
		if tl.Records != 4 || tl.Duplicates != 0 || len(tl.Lost) != 0 || len(tl.Unexpected) != 0 {
			t.Fatalf("%s: %+v, want the 4 committed records once each", who, tl)
		}
		for _, r := range recs {
			if string(r.Value) != "v-"+r.EventID+"\n\tx" || !strings.HasPrefix(string(r.Key), "k") {
				t.Fatalf("%s: record %+v mangled", who, r)
			}
		}
	}

	rd, err := NewReader(c.ListenAddrs(), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := rd.PollUntil(ctx, func(rs []Record) bool { return len(rs) >= 4 }); err != nil {
		t.Fatalf("franz-go: %v (read %d)", err, len(rd.Records()))
	}
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	rd.Poll(sctx)
	scancel()
	check("franz-go", rd.Records())

	RequireKcat(t)
	recs, err := Kcat(ctx, c.ListenAddrs()[0], "t")
	if err != nil {
		t.Fatal(err)
	}
	check("kcat", recs)

	// A duplicate at a new position counts; the same position read twice does not.
	dup := append(slices.Clone(recs), recs[0], Record{Topic: "t", Partition: 9, Offset: 1, EventID: "a"})
	if tl := Count(dup, append(committed, "e")); tl.Duplicates != 1 || !slices.Equal(tl.Lost, []string{"e"}) {
		t.Fatalf("Count: %+v, want 1 duplicate and e lost", tl)
	}
}
