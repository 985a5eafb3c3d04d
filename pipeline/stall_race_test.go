package pipeline

import (
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/sink"
)

// Lanes start and end waits for one timed-out topic while others acknowledge messages for it:
// the stall registry is shared, and go test -race checks that it is read under its lock.
func TestStallRegistryConcurrentLanes(t *testing.T) {
	p := newTestPipeline(t, &memSink{}, &memSaver{}, PoisonDeadLetter)
	base := time.Unix(1700000000, 0)
	mk := func(i int) item {
		return item{txn: &binlog.Txn{GTID: "0-1-1"}, ev: &binlog.Event{EventID: binlog.Field{Bytes: []byte("e")}},
			msg: &sink.Message{Topic: "typo"}, missingSince: base.Add(-time.Duration(i) * time.Second)}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 300 {
				it := mk(g*1000 + i)
				switch g {
				case 0, 1:
					p.stallBegin("main", it)
					p.stallEnd("main", "typo")
				case 2:
					_, _ = p.waitForTopic("main", &it, sink.ErrTopicMissing)
				case 3:
					p.stalls.expired.Store(1)
					p.topicAcked("main", []item{it})
				}
			}
		})
	}
	wg.Wait()
}
