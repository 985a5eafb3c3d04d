package kafkafault

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// forwardedMarker is the TimeoutMillis of the produce requests LoseAnswers forwards, so that its
// control function lets them through.
const forwardedMarker = 29_998

// LoseAnswers makes c store the next count produce requests that name topic but never answer
// them, as when a broker's answer is lost on the way back; after each loss the requests of the
// next gap are answered. It returns how many answers were lost so far, and stop, which ends the
// interception (call it before c closes). The stored copy is written through a client of its
// own, in a request of the same records (producer ids and sequences included).
func LoseAnswers(c *kfake.Cluster, topic string, count int64, gap time.Duration) (lost *atomic.Int64, stop func(), err error) {
	// Produce v13 names topics by id; the forwarded requests carry only names.
	fwd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MaxVersions(kversion.V3_9_0()))
	if err != nil {
		return nil, nil, err
	}
	lost = new(atomic.Int64)
	var mu sync.Mutex
	var last time.Time
	var stopped atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if stopped.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		if req.TimeoutMillis == forwardedMarker || !names(req, topic) {
			return nil, nil, false
		}
		mu.Lock()
		drop := lost.Load() < count && time.Since(last) >= gap
		if drop {
			last = time.Now()
			lost.Add(1)
		}
		mu.Unlock()
		if !drop {
			return nil, nil, false
		}
		return StoreUnanswered(c, fwd, req, forwardedMarker)
	})
	return lost, func() { stopped.Store(true); fwd.Close() }, nil
}

// StoreUnanswered has c store req and never answer it, as when a broker's answer is lost on the
// way back; a Produce control function of c returns its results. The stored copy is written
// through fwd, a client of c of its own, with req's records (producer ids and sequences
// included) and TimeoutMillis marker, so that the control function can let it through.
func StoreUnanswered(c *kfake.Cluster, fwd *kgo.Client, req *kmsg.ProduceRequest, marker int32) (kmsg.Response, error, bool) {
	cp := *req
	cp.TimeoutMillis = marker
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = fwd.Request(ctx, &cp)
	}()
	c.SleepControl(func() { <-done })
	return nil, nil, true // handled, never answered: the client times out
}

// FailProduces makes the next n produce requests of c answer code for every partition they
// name (ProduceError: nothing is stored), then lets requests through again.
func FailProduces(c *kfake.Cluster, n int, code int16) {
	remaining := n
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if remaining <= 0 {
			return nil, nil, false
		}
		remaining--
		if remaining > 0 {
			c.KeepControl()
		}
		return ProduceError(req.(*kmsg.ProduceRequest), code), nil, true
	})
}

func names(req *kmsg.ProduceRequest, topic string) bool {
	for _, t := range req.Topics {
		if t.Topic == topic {
			return true
		}
	}
	return false
}
