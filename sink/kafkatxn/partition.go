package kafkatxn

import "github.com/twmb/franz-go/pkg/kgo"

// autoPartition in Record.Partition before producing asks the partitioner to choose; any other
// value is the message's explicit partition (tables[].columns.partition).
const autoPartition = -1

// partitioner sends a record with an explicit partition there, and otherwise partitions as
// kgo's StickyKeyPartitioner: a keyed record by murmur2 of its key over all of the topic's
// partitions, exactly as Java's default partitioner and sink/kafka (kafka-go's Murmur2Balancer
// with Consistent) do, so a key keeps its partition, and its order, when a deployment switches
// between at-least-once and exactly-once; a record without key sticks to a random partition per
// batch. A partition the topic lacks fails the record (kgo: "invalid record partitioning
// choice"), permanently.
type partitioner struct{ inner kgo.Partitioner }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{p.inner.ForTopic(topic)}
}

type topicPartitioner struct{ inner kgo.TopicPartitioner }

func (t topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition != autoPartition || t.inner.RequiresConsistency(r)
}

func (t topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition != autoPartition {
		return int(r.Partition)
	}
	return t.inner.Partition(r, n)
}

// OnNewBatch passes kgo's batch roll-over to the sticky choice for records without key.
func (t topicPartitioner) OnNewBatch() {
	if nb, ok := t.inner.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
