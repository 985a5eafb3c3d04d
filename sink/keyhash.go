package sink

import "encoding/binary"

// KeyHash returns the murmur2 hash of m.Key by which Kafka's Java client, kafka-go's
// Murmur2Balancer and franz-go's StickyKeyPartitioner partition keyed records (the partition is
// KeyHash()&0x7fffffff modulo the partition count). It is computed on the first call and kept in
// m: the pipeline takes it when it routes the row, while the row's bytes are still in the CPU's
// cache, to pick the key's lane, and the Kafka sink partitions by the same value instead of
// reading the key again long after (in a 100-row catch-up the partitioner's pass over cold keys
// was 4% of outboxd's CPU). Key must not change after the first call; the first call must not
// race another on the same Message (a Message passes between goroutines with synchronisation).
func (m *Message) KeyHash() uint32 {
	if !m.keyHashed {
		m.keyHash, m.keyHashed = murmur2(m.Key), true
	}
	return m.keyHash
}

// murmur2 is Kafka's Utils.murmur2 (Java), which every Kafka client's default partitioner uses.
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m           = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(data))
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
