package pipeline

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/metrics"
)

// DefaultMissingTopicTimeout is how long a message waits for its topic to be created before
// it follows on_poison (Config.MissingTopicWait).
const DefaultMissingTopicTimeout = 5 * time.Minute

// MissingTopic is a topic that messages are waiting for: the broker answered that it does not
// exist, and the pipeline retries until it is created or the wait times out.
type MissingTopic struct {
	Sink  string
	Topic string
	// Since is when the oldest message still waiting first failed for want of it.
	Since time.Time
	// DeadLetter says the topic is the dead-letter topic: when the wait times out, the run
	// stops (there is nowhere else to put the row).
	DeadLetter bool
}

// MissingTopics lists the topics messages are waiting for, sorted by sink and topic, for
// /readyz and /status. Safe for concurrent use.
func (p *Pipeline) MissingTopics() []MissingTopic {
	p.stalls.mu.Lock()
	defer p.stalls.mu.Unlock()
	out := make([]MissingTopic, 0, len(p.stalls.m))
	for k, st := range p.stalls.m {
		if st.lanes == 0 {
			continue // a timed-out topic nothing waits for now
		}
		out = append(out, MissingTopic{Sink: k.sink, Topic: k.topic, Since: st.since, DeadLetter: st.dead})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Sink != out[j].Sink {
			return out[i].Sink < out[j].Sink
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

// MissingTopicTimeout is the configured wait for a missing topic. It does not block.
func (p *Pipeline) MissingTopicTimeout() time.Duration { return p.cfg.MissingTopicWait }

type stallKey struct{ sink, topic string }

type stallState struct {
	lanes int // sendUntilAcked calls holding messages for the topic
	since time.Time
	dead  bool
	// expired: a message already waited MissingTopicWait for this topic and was given up
	// on; later messages for it are given up on at their first failure instead of each
	// waiting again (a typo in a topic template would otherwise hold every key for the
	// timeout in turn). Cleared when a message for the topic is acknowledged.
	expired bool
}

// stalls is the process-wide view of the lanes' waits for missing topics: it turns many lanes'
// retries into one log line and one gauge per topic, when the wait starts and when it ends,
// and it dates the wait per topic, not per message.
type stalls struct {
	mu      sync.Mutex
	m       map[stallKey]*stallState
	expired atomic.Int64 // entries with expired set, so acknowledgements skip the lock when 0
}

// topicWait is one sendUntilAcked call's view of the topics its messages wait for.
type topicWait struct {
	p    *Pipeline
	sink string
	held map[string]bool // topic → registered in p.stalls
}

// update registers the topics of waiting (items whose last failure was a missing topic) and
// releases the topics no longer among them: their messages were acknowledged, failed
// otherwise, or left for on_poison.
func (w *topicWait) update(waiting []item) {
	now := map[string]item{}
	for _, it := range waiting {
		if _, ok := now[it.msg.Topic]; !ok {
			now[it.msg.Topic] = it
		}
	}
	for topic := range w.held {
		if _, ok := now[topic]; !ok {
			w.release(topic)
		}
	}
	for topic, it := range now {
		if w.held[topic] {
			continue
		}
		if w.held == nil {
			w.held = map[string]bool{}
		}
		w.held[topic] = true
		w.p.stallBegin(w.sink, it)
	}
}

func (w *topicWait) release(topic string) {
	delete(w.held, topic)
	w.p.stallEnd(w.sink, topic)
}

// done releases every topic still held (the call returns).
func (w *topicWait) done() {
	for topic := range w.held {
		w.release(topic)
	}
}

// entryLocked returns the state of (sinkName, topic), creating it; p.stalls.mu is held.
func (p *Pipeline) entryLocked(k stallKey, since time.Time, dead bool) (*stallState, bool) {
	if st, ok := p.stalls.m[k]; ok {
		return st, true
	}
	st := &stallState{since: since, dead: dead}
	if p.stalls.m == nil {
		p.stalls.m = map[stallKey]*stallState{}
	}
	p.stalls.m[k] = st
	return st, false
}

// stallBegin records that a lane holds it (and possibly more messages) for its missing topic;
// the first lane to wait for a topic logs it and raises the gauge.
func (p *Pipeline) stallBegin(sinkName string, it item) {
	k := stallKey{sinkName, it.msg.Topic}
	p.stalls.mu.Lock()
	st, _ := p.entryLocked(k, it.missingSince, it.dead)
	st.lanes++
	first := st.lanes == 1
	if it.missingSince.Before(st.since) {
		st.since = it.missingSince
	}
	p.stalls.mu.Unlock()
	if !first {
		return
	}
	p.m.TopicMissing(sinkName, it.msg.Topic, true)
	then := "it follows on_poison: " + p.cfg.OnPoison
	if it.dead {
		then = "outboxd stops (this is the dead-letter topic)"
	}
	p.cfg.Logger.Warn().Str("sink", sinkName).Str("topic", it.msg.Topic).Str("event_id", string(it.ev.EventID.Bytes)).
		Str("gtid", it.txn.GTID).Stringer("missing_topic_timeout", p.cfg.MissingTopicWait).
		Msgf("topic %s does not exist on sink %s: holding its messages (and later ones of the same keys) and retrying until it is created; "+
			"a message still waiting after retry.missing_topic_timeout %s: %s", it.msg.Topic, sinkName, p.cfg.MissingTopicWait, then)
}

// stallEnd records that a lane no longer waits for topic; the last one logs it and clears the
// gauge.
func (p *Pipeline) stallEnd(sinkName, topic string) {
	k := stallKey{sinkName, topic}
	p.stalls.mu.Lock()
	st, ok := p.stalls.m[k]
	if !ok || st.lanes == 0 {
		p.stalls.mu.Unlock()
		return
	}
	st.lanes--
	last := st.lanes == 0
	if last && !st.expired {
		delete(p.stalls.m, k)
	}
	// Read under the lock: an expired entry stays shared with other lanes.
	since, expired := st.since, st.expired
	p.stalls.mu.Unlock()
	if last {
		p.m.TopicMissing(sinkName, topic, false)
		p.cfg.Logger.Info().Str("sink", sinkName).Str("topic", topic).Stringer("waited", p.cfg.Now().Sub(since)).
			Bool("timed_out", expired).Msg("no message waits for the missing topic any more")
	}
}

// topicAcked clears the expired mark of the topics of items, the acknowledged messages of one
// Send (see ackedItems): the topic exists now.
func (p *Pipeline) topicAcked(sinkName string, items []item) {
	if p.stalls.expired.Load() == 0 {
		return // the common case: no topic ever timed out
	}
	p.stalls.mu.Lock()
	defer p.stalls.mu.Unlock()
	for i := range items {
		k := stallKey{sinkName, items[i].msg.Topic}
		if st, ok := p.stalls.m[k]; ok && st.expired {
			st.expired = false
			p.stalls.expired.Add(-1)
			if st.lanes == 0 {
				delete(p.stalls.m, k)
			}
		}
	}
}

// waitForTopic decides, for an item whose send just failed with err for want of its topic,
// whether to keep retrying (nil, nil, with it.missingSince set) or to give up on it now: a
// rejection for on_poison (the topic has been missing for MissingTopicWait, or the
// operator listed the row's event_id in --dead-letter-event), or, for a dead letter whose
// topic is missing, the error that stops the run. The decision is per item, inside its lane:
// a key waiting for its topic holds only its own lane, and the later messages of its key
// behind it, as any transient failure does. The wait is dated per topic: the first failure
// any lane saw for it.
func (p *Pipeline) waitForTopic(name string, it *item, err error) (*rejection, error) {
	now := p.cfg.Now()
	if it.missingSince.IsZero() {
		it.missingSince = now
	}
	k := stallKey{name, it.msg.Topic}
	p.stalls.mu.Lock()
	st, ok := p.stalls.m[k]
	expired := ok && st.expired
	if ok && st.since.Before(it.missingSince) {
		it.missingSince = st.since
	}
	waited := now.Sub(it.missingSince)
	timeout := p.cfg.MissingTopicWait
	giveUp := expired || waited >= timeout
	if giveUp && !expired {
		st, _ = p.entryLocked(k, it.missingSince, it.dead)
		st.expired = true
		p.stalls.expired.Add(1)
	}
	p.stalls.mu.Unlock()

	// how is built only for a message given up on: the common answer, keep retrying, is
	// taken on every retry of every waiting message and formats nothing.
	how := func() string {
		if expired {
			return fmt.Sprintf("still does not exist (an earlier message waited retry.missing_topic_timeout %s for it)", timeout)
		}
		return fmt.Sprintf("still does not exist after %s (retry.missing_topic_timeout %s)", waited.Round(time.Millisecond), timeout)
	}
	if it.dead {
		if !giveUp {
			return nil, nil
		}
		return nil, &PoisonError{Err: fmt.Errorf("dead letter for %s: the dead-letter topic %s of sink %s %s; "+
			"create it, or point dead_letter.topic at a topic that exists: %w", describe(*it), it.msg.Topic, name, how(), err)}
	}
	switch {
	case p.cfg.DeadLetterEvents[string(it.ev.EventID.Bytes)]:
		return &rejection{item: *it, why: metrics.ReasonTopicMissing, early: true, err: fmt.Errorf("%s: topic %s of sink %s does not exist "+
			"(diverted at once by --dead-letter-event): %w", describe(*it), it.msg.Topic, name, err)}, nil
	case giveUp:
		return &rejection{item: *it, why: metrics.ReasonTopicMissing, err: fmt.Errorf("%s: topic %s of sink %s %s; "+
			"create the topic, or fix the route's topic template: %w", describe(*it), it.msg.Topic, name, how(), err)}, nil
	}
	return nil, nil
}
