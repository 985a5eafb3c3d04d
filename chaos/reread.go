package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxd/outboxd/testenv/kafkaread"
)

// A lost row has three possible owners: the producer (outboxd never stored it), the broker
// (it stored and acknowledged it, then lost it), or the verifying consumer (the record is in
// the log, the consumer skipped it). The read-back tells them apart: a fresh client reads the
// whole topic from offset 0 after the run, and the live consumer's view is compared with it.

// record is one record of the read-back.
type record struct {
	part   int32
	offset int64
	id     string
}

// rereadTopic reads every record of the Kafka topic from offset 0 up to its end offsets with
// a fresh client, directly from the broker.
func rereadTopic(ctx context.Context, real string) ([]record, error) {
	cl, err := directClient(real)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafkaTopic)
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	want := map[int32]int64{}
	starts := map[string]map[int32]kgo.Offset{kafkaTopic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			starts[kafkaTopic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	cl.AddConsumePartitions(starts)
	var out []record
	next := map[int32]int64{}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		done := true
		for p, end := range want {
			if next[p] < end {
				done = false
			}
		}
		if done {
			break
		}
		f := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return out, fmt.Errorf("read back: %w (at %v of %v)", rctx.Err(), next, want)
		}
		f.EachRecord(func(r *kgo.Record) {
			out = append(out, record{part: r.Partition, offset: r.Offset, id: kafkaread.EventID(r)})
			next[r.Partition] = r.Offset + 1
		})
		// Control records (transaction markers) are not returned: the end offset may sit
		// behind one, so a partition whose fetches came back empty at its end counts as read.
		f.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.HighWatermark > 0 && len(p.Records) == 0 && p.Err == nil && p.HighWatermark >= want[p.Partition] {
				next[p.Partition] = max(next[p.Partition], want[p.Partition])
			}
		})
	}
	return out, nil
}

// rereadLost reads the topic back and judges each lost Kafka row: in the topic (the live
// consumer missed it) or not (never stored, or lost by the broker). It also compares the live
// consumer's (partition, offset) → event id with the read-back's, and counts jumps in the
// live consumer's offsets.
func (w *world) rereadLost(ctx context.Context, rep *Report, truth map[string]bool, got deliveries, cons *kafkaConsumer) {
	note := func(format string, args ...any) {
		if len(rep.RereadNotes) < 60 {
			rep.RereadNotes = append(rep.RereadNotes, fmt.Sprintf(format, args...))
		}
	}
	recs, err := rereadTopic(ctx, w.kafka.realAddr())
	if err != nil {
		rep.RereadError = "; read-back: " + err.Error()
	}
	type loc struct {
		part   int32
		offset int64
	}
	where := map[string][]loc{}
	at := map[loc]string{}
	for _, r := range recs {
		where[r.id] = append(where[r.id], loc{r.part, r.offset})
		at[loc{r.part, r.offset}] = r.id
	}
	var lost []string
	for id := range truth {
		if _, ok := got.first[id]; !ok {
			lost = append(lost, id)
		}
	}
	sort.Strings(lost)
	live := cons.snapshot()
	for _, id := range lost {
		if ls, ok := where[id]; ok {
			rep.LostMissedByConsumer++
			for _, l := range ls {
				note("lost %s is in the topic at %d/%d (the live consumer got %q there)", id, l.part, l.offset, liveAt(live, int(l.part), l.offset))
			}
		} else if got.first != nil {
			rep.LostInBroker++
			note("lost %s is not in the topic", id)
		}
	}
	// The live consumer's view against the read-back, in arrival order per partition.
	prev := map[int]int64{}
	for _, d := range live {
		if d.Sink != "kafka" {
			continue
		}
		if p, ok := prev[d.Part]; ok && d.Offset != p+1 {
			rep.ConsumerOffsetGaps++
			note("live consumer jumped in partition %d from offset %d to %d at %s", d.Part, p, d.Offset, d.Arrived.Format("15:04:05.000"))
		}
		prev[d.Part] = d.Offset
		if err == nil {
			if id, ok := at[loc{int32(d.Part), d.Offset}]; ok && id != d.ID {
				rep.OffsetsRewritten++
				note("offset %d/%d: the live consumer got %s at %s, the topic now holds %s", d.Part, d.Offset, d.ID, d.Arrived.Format("15:04:05.000"), id)
			}
		}
	}
}

// liveAt is the event ids the live consumer got (live) at partition part, offset off.
func liveAt(live []delivery, part int, off int64) string {
	s := ""
	for _, d := range live {
		if d.Sink == "kafka" && d.Part == part && d.Offset == off {
			if s != "" {
				s += ","
			}
			s += d.ID + "@" + d.Arrived.Format("15:04:05.000")
		}
	}
	return s
}
