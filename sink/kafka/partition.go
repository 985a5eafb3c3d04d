package kafka

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/outboxd/outboxd/sink"
)

// recheckPartitions looks again, in metadata fetched after start, at every topic for which a
// pending message names a partition (tables[].columns.partition) that infos lacks, and puts
// the fresh layout into infos. The cached layout can predate partitions just added to the
// topic: calling such a message out of range from it would make a transient cause permanent
// (on_poison), where "transient failures are retried forever". Only a partition missing from
// the fresh layout is out of range. It blocks for at most a metadata request.
func (s *Sink) recheckPartitions(ctx context.Context, start time.Time, msgs []*sink.Message, errs []error, infos map[string]topicInfo) {
	var stale []string
	for i, m := range msgs {
		if errs[i] != nil || !m.HasPartition {
			continue
		}
		if ti := infos[m.Topic]; ti.err == nil && !slices.Contains(ti.partitions, int(m.Partition)) && !slices.Contains(stale, m.Topic) {
			stale = append(stale, m.Topic)
		}
	}
	if len(stale) == 0 {
		return
	}
	sort.Strings(stale)
	s.refresh(start, errors.New("a message names a partition missing from the cached metadata"))
	for t, ti := range s.resolve(ctx, start, stale) {
		infos[t] = ti
	}
}

// partitionWaves numbers the pending messages' send waves: a keyed message is one wave after
// its key's previous message in the same topic when that one goes to another partition, else
// in the same wave (one partition keeps slice order by itself). It returns the wave of every
// message and the number of waves; without explicit partitions there is one wave and no work.
// Keys across topics stay in one wave, as before explicit partitions: a topic has its own
// order.
func partitionWaves(msgs []*sink.Message, errs []error, infos map[string]topicInfo) (waves []int, n int) {
	if !slices.ContainsFunc(msgs, func(m *sink.Message) bool { return m != nil && m.HasPartition }) {
		return nil, 1
	}
	type last struct{ partition, wave int }
	type topicKey struct{ topic, key string }
	prev := make(map[topicKey]last)
	waves = make([]int, len(msgs))
	n = 1
	for i, m := range msgs {
		if errs[i] != nil || m.Key == nil {
			continue
		}
		p := int(m.Partition)
		if !m.HasPartition {
			p = keyPartition(m, infos[m.Topic].partitions)
		}
		k := topicKey{m.Topic, string(m.Key)}
		w := 0
		if l, ok := prev[k]; ok {
			w = l.wave
			if l.partition != p {
				w++
			}
		}
		prev[k] = last{p, w}
		waves[i] = w
		n = max(n, w+1)
	}
	return waves, n
}

// keyPartition is the partition of parts (the topic's sorted partition ids) that Java's default
// partitioner, and kafka-go's Murmur2Balancer with Consistent, give m's key: murmur2, made
// positive, modulo the partition count. The hash is the message's kept one (sink.KeyHash), which
// the pipeline took when it routed the row.
func keyPartition(m *sink.Message, parts []int) int {
	return parts[(m.KeyHash()&0x7fffffff)%uint32(len(parts))]
}
