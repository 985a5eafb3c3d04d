package kafka

import (
	"sync"
	"time"
)

// topicCacheTTL bounds how long resolve reuses a topic's partitions and leaders without asking
// kafka-go's transport again. Asking cost ~20 allocations and a pass through the transport's
// metadata per Send; the transport's own cache (metadataTTL) is refreshed less often anyway, and
// every refresh (a routing or leadership error) empties this one.
const topicCacheTTL = time.Second

// topicCache holds the topicInfos resolve found, only successful ones: a missing or failing
// topic is always looked up again. Safe for concurrent use.
type topicCache struct {
	mu    sync.Mutex
	at    time.Time // when the entries were fetched; zero: empty
	infos map[string]topicInfo
	// cleared is the last clear: infos fetched before it are not cached.
	cleared time.Time
}

// get returns the cached info of every topic in topics, or false unless all are cached and
// fresh at now.
func (c *topicCache) get(topics []string, now time.Time) (map[string]topicInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || now.Sub(c.at) >= topicCacheTTL {
		return nil, false
	}
	out := make(map[string]topicInfo, len(topics))
	for _, t := range topics {
		ti, ok := c.infos[t]
		if !ok {
			return nil, false
		}
		out[t] = ti
	}
	return out, true
}

// put caches the successful infos, fetched at fetched; older entries go when the fetch time
// moves, so all entries share one age. Infos fetched before the last clear, or before the
// cached ones, are dropped, and a topic never goes back to fewer partitions until a clear.
func (c *topicCache) put(infos map[string]topicInfo, fetched time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fetched.Before(c.cleared) || fetched.Before(c.at) {
		return // an older fetch finishing late must not replace a newer layout
	}
	prev := c.infos
	if !fetched.Equal(c.at) {
		c.at, c.infos = fetched, make(map[string]topicInfo, len(infos))
	}
	for t, ti := range infos {
		if ti.err != nil {
			continue
		}
		// A topic's partition count only grows: fewer than cached is a layout read before
		// the one cached (fetch start order is not read order), and a key moved back to its
		// old partition for a second would break its order. Keep the newer one.
		if old, ok := prev[t]; ok && len(old.partitions) > len(ti.partitions) {
			ti = old
		}
		c.infos[t] = ti
	}
}

// clear empties the cache (metadata is being refreshed).
func (c *topicCache) clear() {
	c.mu.Lock()
	c.at, c.infos, c.cleared = time.Time{}, nil, time.Now()
	c.mu.Unlock()
}
