package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceShape counts what the produce requests reaching a kfake child carry, printed to the
// bench's log when the broker exits: with the relays' throughput it shows whether the broker's
// cost per request bounds a catch-up. It does not: on the 100-row catch-up kafka-go's
// Client.Produce floor sent ~10,600 requests of one partition and ~94 records, franz-go ~1,400
// of 11 partitions and ~700 records, outboxd ~850–1,450 of 12 partitions and ~700–1,150
// records, and the floors' throughput did not follow the request count.
type produceShape struct{ reqs, parts, batches, records, bytes atomic.Int64 }

// hook installs a Produce control function on c that counts every request and lets kfake
// handle it as usual.
func (s *produceShape) hook(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr, ok := req.(*kmsg.ProduceRequest)
		if !ok {
			return nil, nil, false
		}
		s.reqs.Add(1)
		for _, t := range pr.Topics {
			for _, p := range t.Partitions {
				s.parts.Add(1)
				raw := p.Records
				s.bytes.Add(int64(len(raw)))
				for len(raw) >= 61 {
					n := 12 + int(int32(binary.BigEndian.Uint32(raw[8:12])))
					if n > len(raw) || n < 12 {
						break
					}
					s.batches.Add(1)
					s.records.Add(int64(int32(binary.BigEndian.Uint32(raw[57:61]))))
					raw = raw[n:]
				}
			}
		}
		return nil, nil, false
	})
}

// print writes the counts to stderr (the bench's log), nothing when no request came.
func (s *produceShape) print() {
	r := s.reqs.Load()
	if r == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "bench kfake: %d produce requests, per request %.1f partitions, %.1f record batches, %.1f records (%.1f per batch), %.0f KiB\n",
		r, float64(s.parts.Load())/float64(r), float64(s.batches.Load())/float64(r), float64(s.records.Load())/float64(r),
		float64(s.records.Load())/float64(s.batches.Load()), float64(s.bytes.Load())/float64(r)/1024)
}
