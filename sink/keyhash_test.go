package sink

import (
	"math/rand/v2"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
)

// TestKeyHashIsKafkasPartitioner checks KeyHash against kafka-go's Murmur2Balancer (Java's
// default partitioner) on keys of every length remainder, and that the cached value follows the
// key it was computed for.
func TestKeyHashIsKafkasPartitioner(t *testing.T) {
	parts := make([]int, 97)
	for i := range parts {
		parts[i] = i
	}
	bal := kafkago.Murmur2Balancer{Consistent: true}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := [][]byte{{}, []byte("k1"), []byte("order-42"), []byte("ключ")}
	for n := range 70 {
		k := make([]byte, n)
		for i := range k {
			k[i] = byte(rng.Uint32())
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		m := &Message{Key: k}
		want := bal.Balance(kafkago.Message{Key: k}, parts...)
		if got := int(m.KeyHash()&0x7fffffff) % len(parts); got != want {
			t.Fatalf("key %q: partition %d by KeyHash, %d by kafka-go's Murmur2Balancer", k, got, want)
		}
		if again := int(m.KeyHash()&0x7fffffff) % len(parts); again != want {
			t.Fatalf("key %q: second KeyHash gave partition %d, want %d", k, again, want)
		}
	}
}
