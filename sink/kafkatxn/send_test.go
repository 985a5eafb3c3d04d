package kafkatxn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/sink"
)

// TestPartitionerAgreesWithSinkKafka: a key lands on the partition sink/kafka (kafka-go's
// Murmur2Balancer, consistent, as Java's default partitioner) picks, so switching a deployment
// between at-least-once and exactly-once keeps each key's partition and so its order.
func TestPartitionerAgreesWithSinkKafka(t *testing.T) {
	tp := partitioner{kgo.StickyKeyPartitioner(nil)}.ForTopic("t")
	balancer := kafkago.Murmur2Balancer{Consistent: true}
	for n := 1; n <= 12; n++ {
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		for k := range 2000 {
			key := fmt.Appendf(nil, "order-%d", k)
			r := &kgo.Record{Key: key, Partition: autoPartition}
			if !tp.RequiresConsistency(r) {
				t.Fatal("a keyed record must hash over all partitions")
			}
			if got, want := tp.Partition(r, n), balancer.Balance(kafkago.Message{Key: key}, parts...); got != want {
				t.Fatalf("key %s over %d partitions: kgo picks %d, sink/kafka %d", key, n, got, want)
			}
		}
	}
	if got := tp.Partition(&kgo.Record{Key: []byte("x"), Partition: 2}, 3); got != 2 {
		t.Fatalf("explicit partition 2 became %d", got)
	}
}

// TestPerKeyOrderAcrossSends: many Sends of interleaved keys on a 3-partition topic arrive, read
// back read_committed, in send order per key, on the partition sink/kafka would have chosen.
func TestPerKeyOrderAcrossSends(t *testing.T) {
	c := cluster(t)
	s := open(t, options(c.ListenAddrs(), nil))
	ctx := testCtx(t)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6"}
	const sends, per = 40, 3
	for i := range sends {
		var batch []*sink.Message
		for _, k := range keys {
			batch = append(batch, msgs(k, i*per, per)...)
		}
		if err := s.Send(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if err := s.Save(ctx, cp(t, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	rs := readCommitted(t, c.ListenAddrs(), eventsTopic)
	if len(rs) != sends*per*len(keys) {
		t.Fatalf("read back %d records, want %d", len(rs), sends*per*len(keys))
	}
	next := map[string]int{}
	balancer := kafkago.Murmur2Balancer{Consistent: true}
	for _, r := range rs {
		k := string(r.Key)
		if want := fmt.Sprintf("%s-%d", k, next[k]); string(r.Value) != want {
			t.Fatalf("key %s: got %s, want %s next", k, r.Value, want)
		}
		next[k]++
		if want := balancer.Balance(kafkago.Message{Key: r.Key}, 0, 1, 2); int(r.Partition) != want {
			t.Fatalf("key %s on partition %d, sink/kafka uses %d", k, r.Partition, want)
		}
		if len(r.Headers) != 1 || r.Headers[0].Key != "event_id" {
			t.Fatalf("headers %v", r.Headers)
		}
	}
}

// TestCompressionReadsBackByteForByte: each codec's records come back as sent.
func TestCompressionReadsBackByteForByte(t *testing.T) {
	c := cluster(t)
	payload := bytes.Repeat([]byte("outbox row payload, compressible; "), 200)
	for i, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			o := options(c.ListenAddrs(), nil)
			o.Compression = codec
			o.TransactionalID = "outboxd-" + codec
			o.Key = codec
			s := open(t, o)
			ctx := testCtx(t)
			m := &sink.Message{Topic: eventsTopic, Key: []byte(codec), Value: append(fmt.Appendf(nil, "%d:", i), payload...)}
			if err := s.Send(ctx, []*sink.Message{m}); err != nil {
				t.Fatal(err)
			}
			if err := s.Save(ctx, cp(t, i)); err != nil {
				t.Fatal(err)
			}
			if got := load(t, s); got == nil || got.GTIDSet != fmt.Sprintf("0-1-%d", i) {
				t.Fatalf("Load = %+v", got)
			}
			var found bool
			for _, r := range readCommitted(t, c.ListenAddrs(), eventsTopic) {
				if string(r.Key) == codec {
					found = bytes.Equal(r.Value, m.Value)
					if got := r.Attrs.CompressionType(); got != uint8(i) { // the codecs' wire ids, in order
						t.Fatalf("the batch was stored with codec %d, want %d", got, i)
					}
				}
			}
			if !found {
				t.Fatal("the record did not read back byte for byte")
			}
		})
	}
	s, err := New(Options{Brokers: c.ListenAddrs(), TransactionalID: "x", Topic: "t", Key: "k", Compression: "brotli"})
	if err == nil || !strings.Contains(err.Error(), "use none, gzip, snappy, lz4 or zstd") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("unknown codec: %v", err)
	}
}

// TestOversizedFailsBeforeProducing: a message above MaxMessageBytes fails permanently and
// alone; the transaction still commits the others.
func TestOversizedFailsBeforeProducing(t *testing.T) {
	c := cluster(t)
	o := options(c.ListenAddrs(), nil)
	o.MaxMessageBytes = 2000
	s := open(t, o)
	ctx := testCtx(t)
	batch := msgs("a", 0, 2)
	batch = append(batch, &sink.Message{Topic: eventsTopic, Key: []byte("big"), Value: make([]byte, 3000)})
	var se *sink.SendError
	if err := s.Send(ctx, batch); !errors.As(err, &se) || len(se.Failures) != 1 || se.Failures[0].Index != 2 || !sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("Send with an oversized message: %v", err)
	}
	if err := s.Save(ctx, cp(t, 1)); err != nil {
		t.Fatalf("Save after an oversized message: %v", err)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 2 {
		t.Fatalf("read back %v", vs)
	}
}

// TestFailedRecordAbortsTheTransaction: a record the broker side refuses for good (a partition
// the topic lacks) fails permanently and dooms the transaction: Save aborts, wraps
// ErrTxnAborted, and nothing of it is visible; the next transaction works.
func TestFailedRecordAbortsTheTransaction(t *testing.T) {
	c := cluster(t)
	var n counters
	s := open(t, options(c.ListenAddrs(), &n))
	ctx := testCtx(t)
	if err := s.Send(ctx, msgs("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	bad := msgs("b", 0, 2)
	bad[0].HasPartition, bad[0].Partition = true, 7
	var se *sink.SendError
	err := s.Send(ctx, bad)
	if !errors.As(err, &se) || len(se.Failures) != 2 || !sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("Send to a missing partition: %v (want both b messages failed, the first permanently)", err)
	}
	if err := s.Save(ctx, cp(t, 1)); !errors.Is(err, sink.ErrTxnAborted) {
		t.Fatalf("Save of a doomed transaction: %v, want ErrTxnAborted", err)
	}
	if got := load(t, s); got != nil {
		t.Fatalf("Load = %+v, want nil", got)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 0 {
		t.Fatalf("read_committed sees %v of the aborted transaction", vs)
	}
	if err := s.Send(ctx, msgs("c", 0, 1)); err != nil {
		t.Fatalf("Send after the abort: %v", err)
	}
	if err := s.Save(ctx, cp(t, 2)); err != nil {
		t.Fatalf("Save after the abort: %v", err)
	}
	if n.committed.Load() != 1 || n.aborted.Load() != 1 {
		t.Fatalf("OnTxn: %d commits, %d aborts; want 1, 1", n.committed.Load(), n.aborted.Load())
	}
}

// TestConcurrentSendsThenSave: Sends from several goroutines join one transaction, and the Save
// after them commits them all.
func TestConcurrentSendsThenSave(t *testing.T) {
	c := cluster(t)
	s := open(t, options(c.ListenAddrs(), nil))
	ctx := testCtx(t)
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			var err error
			for i := 0; i < 10 && err == nil; i++ {
				err = s.Send(ctx, msgs(fmt.Sprintf("g%d", g), i*5, 5))
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Save(ctx, cp(t, 1)); err != nil {
		t.Fatal(err)
	}
	if rs := readCommitted(t, c.ListenAddrs(), eventsTopic); len(rs) != 200 {
		t.Fatalf("read back %d records, want 200", len(rs))
	}
}

// TestCancelledSendDoomsTheTransaction: a Send cut short by its context reports every message
// failed and retryable; what it may have sent cannot be committed, so Save aborts.
func TestCancelledSendDoomsTheTransaction(t *testing.T) {
	c := cluster(t)
	s := open(t, options(c.ListenAddrs(), nil))
	ctx := testCtx(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var se *sink.SendError
	if err := s.Send(cancelled, msgs("a", 0, 3)); !errors.As(err, &se) || len(se.Failures) != 3 || sink.IsPermanent(se.Failures[0].Err) {
		t.Fatalf("Send with a cancelled context: %v", err)
	}
	if err := s.Save(ctx, cp(t, 1)); !errors.Is(err, sink.ErrTxnAborted) {
		t.Fatalf("Save after a cancelled Send: %v, want ErrTxnAborted", err)
	}
	if err := s.Send(ctx, msgs("b", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, cp(t, 2)); err != nil {
		t.Fatal(err)
	}
	if vs := values(readCommitted(t, c.ListenAddrs(), eventsTopic)); len(vs) != 1 || !vs["b-0"] {
		t.Fatalf("read_committed sees %v, want b-0", vs)
	}
}

// The broker's refusals sort into permanent (the record), waiting for a topic, and retryable;
// INVALID_TIMESTAMP is retried and says the likelier cause, the clocks.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err                error
		permanent, missing bool
		says               string
	}{
		{kerr.MessageTooLarge, true, false, ""},
		{kerr.TopicAuthorizationFailed, true, false, "grant"},
		{kerr.UnknownTopicOrPartition, false, true, ""},
		{kerr.InvalidTimestamp, false, false, "outboxd_source_clock_offset_seconds"},
		{kerr.NotEnoughReplicas, false, false, ""},
	} {
		got := classify("t", tc.err)
		if sink.IsPermanent(got) != tc.permanent || sink.IsTopicMissing(got) != tc.missing || !errors.Is(got, tc.err) ||
			!strings.Contains(got.Error()+fmt.Sprint(fixOf(got)), tc.says) {
			t.Errorf("classify(%v) = %v: permanent %v missing %v, want %v %v, saying %q", tc.err, got,
				sink.IsPermanent(got), sink.IsTopicMissing(got), tc.permanent, tc.missing, tc.says)
		}
	}
}

func fixOf(err error) string {
	var fe *sink.FixError
	if errors.As(err, &fe) {
		return fe.Fix
	}
	return ""
}
