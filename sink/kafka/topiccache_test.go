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
