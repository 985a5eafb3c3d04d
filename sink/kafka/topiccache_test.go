package kafka

import (
	"errors"
	"testing"
	"time"
)

// The cache answers only when every topic is cached and fresh, never caches a failed topic, and
// drops what was fetched before a clear (a refresh).
func TestTopicCache(t *testing.T) {
	var c topicCache
	t0 := time.Now()
	c.put(map[string]topicInfo{"a": {partitions: []int{0}}, "bad": {err: errors.New("x")}}, t0)
	if got, ok := c.get([]string{"a"}, t0.Add(topicCacheTTL/2)); !ok || len(got["a"].partitions) != 1 {
		t.Fatalf("fresh topic a: %v, %v", got, ok)
	}
	if _, ok := c.get([]string{"a", "bad"}, t0); ok {
		t.Error("a failed topic was cached")
	}
	if _, ok := c.get([]string{"a"}, t0.Add(topicCacheTTL)); ok {
		t.Error("an entry older than the TTL was used")
	}
	c.clear()
	if _, ok := c.get([]string{"a"}, t0); ok {
		t.Error("an entry survived clear")
	}
	c.put(map[string]topicInfo{"a": {partitions: []int{0}}}, t0) // fetched before the clear
	if _, ok := c.get([]string{"a"}, time.Now()); ok {
		t.Error("an entry fetched before the clear was cached")
	}
}

// A fetch that read the layout before the cached one but started after it must not take a
// topic back to fewer partitions: its keys would move back to their old partitions.
func TestTopicCacheKeepsTheLargerPartitionCount(t *testing.T) {
	var c topicCache
	t0 := time.Now()
	c.put(map[string]topicInfo{"a": {partitions: []int{0, 1, 2, 3, 4, 5, 6, 7}}}, t0)
	c.put(map[string]topicInfo{"a": {partitions: []int{0, 1, 2, 3}}, "b": {partitions: []int{0}}}, t0.Add(time.Millisecond))
	got, ok := c.get([]string{"a", "b"}, t0.Add(2*time.Millisecond))
	if !ok || len(got["a"].partitions) != 8 || len(got["b"].partitions) != 1 {
		t.Fatalf("cache %v (ok %v), want a with 8 partitions kept and b cached", got, ok)
	}
	c.clear()
	c.put(map[string]topicInfo{"a": {partitions: []int{0, 1}}}, time.Now())
	if got, ok := c.get([]string{"a"}, time.Now()); !ok || len(got["a"].partitions) != 2 {
		t.Fatalf("after a clear the cache %v (ok %v), want the new layout (a topic recreated smaller)", got, ok)
	}
}
