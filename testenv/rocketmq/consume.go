package rocketmq

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"
)

// The consumer side's request and response codes (RequestCode / ResponseCode).
const (
	ReqQueryConsumerOffset      = 14
	ReqUpdateConsumerOffset     = 15
	ReqConsumerSendMsgBack      = 36
	ReqGetConsumerListByGroup   = 38
	ReqNotifyConsumerIdsChanged = 40

	CodeQueryNotFound = 22
)

// Pull sysFlag bits (PullSysFlag).
const (
	pullFlagCommitOffset = 1 << 0
	pullFlagSuspend      = 1 << 1
)

// maxSuspend caps how long a pull waits at a queue's end (the client asks for 20 s), so that a
// consumer's shutdown is not held up in tests.
const maxSuspend = 5 * time.Second

// groupState is one consumer group: its live clients and committed offsets.
type groupState struct {
	// clients maps a client id to the connections it heartbeat on; a client whose last
	// connection closes leaves the group, as a real broker drops a closed channel.
	clients map[string]map[*serverConn]struct{}
	offsets map[queueKey]int64
	// topics are the topics the group's heartbeats subscribed to.
	topics map[string]bool
}

type queueKey struct {
	topic string
	queue int
}

// RetryTopic and DLQTopic are the group's retry and dead-letter topics.
func RetryTopic(group string) string { return "%RETRY%" + group }
func DLQTopic(group string) string   { return "%DLQ%" + group }

func (c *Cluster) groupLocked(name string) *groupState {
	g := c.groups[name]
	if g == nil {
		g = &groupState{clients: map[string]map[*serverConn]struct{}{}, offsets: map[queueKey]int64{}, topics: map[string]bool{}}
		c.groups[name] = g
	}
	return g
}

// handleConsumer answers the consumer-group requests; ok is false for any other code.
func (c *Cluster) handleConsumer(req *command) (reply, bool) {
	f := req.ExtFields
	switch req.Code {
	case ReqHeartbeat:
		return c.handleHeartbeat(req), true
	case ReqUnregisterClient:
		c.mu.Lock()
		changed := c.leaveLocked(f["consumerGroup"], f["clientID"])
		c.mu.Unlock()
		c.notifyChanged(changed)
		return reply{resp: response(CodeSuccess, "")}, true
	case ReqGetConsumerListByGroup:
		c.mu.Lock()
		var ids []string
		if g := c.groups[f["consumerGroup"]]; g != nil {
			ids = slices.Sorted(maps.Keys(g.clients))
		}
		c.mu.Unlock()
		if len(ids) == 0 {
			return reply{resp: response(CodeSystemError, "no consumer for this group, "+f["consumerGroup"])}, true
		}
		body, _ := json.Marshal(map[string][]string{"consumerIdList": ids}) // cannot fail
		r := response(CodeSuccess, "")
		r.Body = body
		return reply{resp: r}, true
	case ReqQueryConsumerOffset:
		c.mu.Lock()
		off, ok := c.groupLocked(f["consumerGroup"]).offsets[queueKey{f["topic"], atoiOr(f["queueId"], -1)}]
		c.mu.Unlock()
		if !ok {
			return reply{resp: response(CodeQueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")}, true
		}
		r := response(CodeSuccess, "")
		r.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
		return reply{resp: r}, true
	case ReqUpdateConsumerOffset:
		off, err := strconv.ParseInt(f["commitOffset"], 10, 64)
		if err == nil {
			c.commitOffsetFor(f["consumerGroup"], f["topic"], atoiOr(f["queueId"], -1), off)
		}
		return reply{resp: response(CodeSuccess, "")}, true
	case ReqConsumerSendMsgBack:
		return c.handleSendBack(req), true
	}
	return reply{}, false
}

// heartbeat is the part of HeartbeatData the broker uses.
type heartbeat struct {
	ClientID      string `json:"clientID"`
	ConsumerDatas []struct {
		GroupName     string `json:"groupName"`
		Subscriptions []struct {
			Topic string `json:"topic"`
		} `json:"subscriptionDataSet"`
	} `json:"consumerDataSet"`
}

// handleHeartbeat registers the client's consumer groups on the request's connection and,
// like a real broker, creates each group's retry topic (one queue).
func (c *Cluster) handleHeartbeat(req *command) reply {
	var hb heartbeat
	if err := json.Unmarshal(req.Body, &hb); err != nil || req.conn == nil {
		return reply{resp: response(CodeSuccess, "")} // a producer's heartbeat is not looked at
	}
	var changed []string
	c.mu.Lock()
	for _, cd := range hb.ConsumerDatas {
		g := c.groupLocked(cd.GroupName)
		conns := g.clients[hb.ClientID]
		if conns == nil {
			conns = map[*serverConn]struct{}{}
			g.clients[hb.ClientID] = conns
			changed = append(changed, cd.GroupName)
		}
		conns[req.conn] = struct{}{}
		for _, s := range cd.Subscriptions {
			g.topics[s.Topic] = true
		}
		c.createTopicLocked(RetryTopic(cd.GroupName), 1)
	}
	c.mu.Unlock()
	c.notifyChanged(changed)
	return reply{resp: response(CodeSuccess, "")}
}

// subscribedLocked reports whether a heartbeat of group subscribed it to topic.
func (c *Cluster) subscribedLocked(group, topic string) bool {
	g := c.groups[group]
	return g != nil && g.topics[topic]
}

// leaveLocked removes client from group and returns the group when that changed its members.
func (c *Cluster) leaveLocked(group, client string) []string {
	g := c.groups[group]
	if g == nil || g.clients[client] == nil {
		return nil
	}
	delete(g.clients, client)
	return []string{group}
}

// connClosed drops the clients whose last connection sc was, as a broker does when a channel
// closes (a consumer killed -9 leaves its group at once).
func (c *Cluster) connClosed(sc *serverConn) {
	var changed []string
	c.mu.Lock()
	for name, g := range c.groups {
		for id, conns := range g.clients {
			if _, ok := conns[sc]; !ok {
				continue
			}
			delete(conns, sc)
			if len(conns) == 0 {
				delete(g.clients, id)
				changed = append(changed, name)
			}
		}
	}
	c.mu.Unlock()
	c.notifyChanged(changed)
}

// notifyChanged sends NOTIFY_CONSUMER_IDS_CHANGED to every member of the groups, so that they
// rebalance at once instead of at their next 20 s rebalance.
func (c *Cluster) notifyChanged(groups []string) {
	type target struct {
		group string
		conn  *serverConn
	}
	var ts []target
	c.mu.Lock()
	for _, name := range groups {
		if g := c.groups[name]; g != nil {
			for _, conns := range g.clients {
				for sc := range conns {
					ts = append(ts, target{name, sc})
				}
			}
		}
	}
	c.mu.Unlock()
	for _, t := range ts {
		cmd := &command{Code: ReqNotifyConsumerIdsChanged, ExtFields: map[string]string{"consumerGroup": t.group}}
		if err := t.conn.notify(cmd); err != nil && !isEOF(err) {
			c.logf("broker: notify %s of group %s: %v", t.conn.RemoteAddr(), t.group, err)
		}
	}
}

func (c *Cluster) commitOffsetFor(group, topic string, queue int, off int64) {
	if group == "" || queue < 0 || off < 0 {
		return
	}
	c.mu.Lock()
	c.groupLocked(group).offsets[queueKey{topic, queue}] = off
	c.mu.Unlock()
}

// commitPulledOffset stores the offset a consumer's pull commits (sysFlag bit 0).
func (c *Cluster) commitPulledOffset(req *command) {
	f := req.ExtFields
	if atoiOr(f["sysFlag"], 0)&pullFlagCommitOffset == 0 {
		return
	}
	if off, err := strconv.ParseInt(f["commitOffset"], 10, 64); err == nil {
		c.commitOffsetFor(f["consumerGroup"], f["topic"], atoiOr(f["queueId"], -1), off)
	}
}

// suspendTime is how long a pull that found nothing waits, and whether it asked to.
func suspendTime(req *command) (time.Duration, bool) {
	f := req.ExtFields
	if atoiOr(f["sysFlag"], 0)&pullFlagSuspend == 0 {
		return 0, false
	}
	ms, err := strconv.ParseInt(f["suspendTimeoutMillis"], 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return min(time.Duration(ms)*time.Millisecond, maxSuspend), true
}

// handleSendBack answers CONSUMER_SEND_MSG_BACK: the message at the commit log offset goes to
// the group's retry topic after Options.RetryDelay with its reconsume count raised, or to the
// dead-letter topic once that count reaches maxReconsumeTimes. Its properties keep the
// original topic (RETRY_TOPIC) and message id (ORIGIN_MESSAGE_ID), as a broker sets them.
func (c *Cluster) handleSendBack(req *command) reply {
	f := req.ExtFields
	group := f["group"]
	off, err := strconv.ParseInt(f["offset"], 10, 64)
	if err != nil || group == "" {
		return reply{resp: response(CodeSystemError, "send back without group or offset")}
	}
	maxTimes := atoiOr(f["maxReconsumeTimes"], 16)
	c.mu.Lock()
	orig, found := c.findByCommitOffsetLocked(off)
	c.mu.Unlock()
	if !found {
		return reply{resp: response(CodeSystemError, "look message by offset failed, "+f["offset"])}
	}
	m := Message{Body: orig.Body, Flag: orig.Flag, BornTime: orig.BornTime, Keys: orig.Keys, Tags: orig.Tags,
		Properties: maps.Clone(orig.Properties), ReconsumeTimes: orig.ReconsumeTimes + 1}
	if _, ok := m.Properties["RETRY_TOPIC"]; !ok {
		m.Properties["RETRY_TOPIC"] = orig.Topic
	}
	if _, ok := m.Properties["ORIGIN_MESSAGE_ID"]; !ok {
		m.Properties["ORIGIN_MESSAGE_ID"] = f["originMsgId"]
	}
	m.MsgID = orig.MsgID
	delay := c.opts.RetryDelay
	m.Topic = RetryTopic(group)
	if m.ReconsumeTimes > maxTimes || f["delayLevel"] == "-1" {
		m.Topic, delay = DLQTopic(group), 0
	}
	store := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return
		}
		c.storeLocked(c.createTopicLocked(m.Topic, 1), []Message{m})
	}
	if delay == 0 {
		store()
	} else {
		time.AfterFunc(delay, store)
	}
	return reply{resp: response(CodeSuccess, "")}
}

func (c *Cluster) findByCommitOffsetLocked(off int64) (Message, bool) {
	for _, ts := range c.topics {
		for _, q := range ts.queues {
			for _, m := range q {
				if m.CommitLogOffset == off {
					return m, true
				}
			}
		}
	}
	return Message{}, false
}
