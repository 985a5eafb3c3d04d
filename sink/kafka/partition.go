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
