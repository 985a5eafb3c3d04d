package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/sink"
)

// ackSink acknowledges every Send at once: the benchmark measures the pipeline, not a broker.
type ackSink struct{}

// fileCommitter is the file store as the Committer of exactly-once mode (Abort has nothing to
// drop): the exactly_once rows measure the pipeline's commits, a drain and an fsync each.
type fileCommitter struct{ Saver }

func (fileCommitter) Abort(context.Context) error { return nil }

func (ackSink) Send(context.Context, []*sink.Message) error { return nil }
func (ackSink) Close() error                                { return nil }

// BenchmarkCatchUp is a catch-up through the pipeline: 100-row (or 1-row) transactions of 10,000 keys
// routed, laned, sent to a sink that acknowledges at once, the checkpoint saved to a file store
// (fsync and rename, as in production) every interval. It reports ns and allocations per event;
// a save must not slow the stream, so interval=100ms should match interval=1s. The
// exactly_once rows commit (Config.Transactions, defaults) instead of saving on a timer.
// go test ./pipeline -run '^$' -bench CatchUp -benchtime 5x -benchmem
func BenchmarkCatchUp(b *testing.B) {
	for _, c := range []struct {
		txns, rows int
		iv         time.Duration
		eos        bool
	}{
		{3000, 100, time.Second, false}, {3000, 100, 100 * time.Millisecond, false}, {3000, 100, 10 * time.Millisecond, false}, {100_000, 1, time.Second, false},
		{3000, 100, time.Second, true}, {100_000, 1, time.Second, true},
	} {
		txns, rows, iv := c.txns, c.rows, c.iv
		name := fmt.Sprintf("rows=%d/interval=%s", rows, iv)
		if c.eos {
			name = fmt.Sprintf("rows=%d/exactly_once", rows)
		}
		b.Run(name, func(b *testing.B) {
			in := make([]*binlog.Txn, txns)
			for i := range in {
				t := &binlog.Txn{GTID: fmt.Sprintf("0-1-%d", i+1), File: "mysql-bin.000001", Pos: uint32(i * 100), Events: make([]binlog.Event, rows)}
				for j := range t.Events {
					n := i*rows + j
					t.Events[j] = binlog.Event{Schema: "shop", Table: "outbox_event",
						EventID: binlog.Field{Bytes: fmt.Appendf(nil, "ev-%d", n)}, Key: binlog.Field{Bytes: fmt.Appendf(nil, "key-%d", n%10000)},
						Topic: binlog.Field{Bytes: []byte("t")}, Payload: binlog.Field{Bytes: make([]byte, 1024)}}
				}
				in[i] = t
			}
			store, err := checkpoint.Open(filepath.Join(b.TempDir(), "checkpoint.json"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cfg := Config{
					Router: fakeRouter{}, Sinks: map[string]sink.Sink{"main": ackSink{}}, Saver: store,
					Start: gtid.Empty(gtid.MariaDB), CheckpointInterval: iv, Logger: zerolog.Nop(),
				}
				if c.eos {
					cfg.Saver, cfg.Transactions = fileCommitter{store}, &Transactions{MaxAge: iv}
				}
				p, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				ch := make(chan *binlog.Txn, 64)
				go func() {
					for _, t := range in {
						ch <- t
					}
					close(ch)
				}()
				if err := p.Run(context.Background(), ch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*txns*rows), "ns/event")
		})
	}
}
