package rocketmq

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Read-side request and response codes (RequestCode / ResponseCode), for readers such as
// outboxd reconcile: they pull queues by offset after searching the offset of a store time.
const (
	ReqPullMessage             = 11
	ReqSearchOffsetByTimestamp = 29
	ReqGetMaxOffset            = 30
	ReqGetMinOffset            = 31

	CodePullNotFound = 19
	// CodeSubscriptionNotExist is the answer to a pull that names no subscription of its own.
	CodeSubscriptionNotExist = 24
)

// pullFlagSubscription is PullSysFlag.FLAG_SUBSCRIPTION: the pull carries its subscription
// expression. Without it the broker takes the subscription from the consumer group's heartbeat
// registration (PullMessageProcessor), as this broker does (consume.go): a reader that sent no
// heartbeat for its group gets SUBSCRIPTION_NOT_EXIST.
const pullFlagSubscription = 0x4

// maxPullMessages caps one pull's answer, like the broker's maxTransferCountOnMessageInMemory.
const maxPullMessages = 32

// handleRead answers the read requests; ok is false for any other code.
func (c *Cluster) handleRead(req *command) (reply, bool) {
	switch req.Code {
	case ReqGetMaxOffset, ReqGetMinOffset, ReqSearchOffsetByTimestamp:
	case ReqPullMessage:
		return c.handlePull(req), true
	default:
		return reply{}, false
	}
	topic, q := req.ExtFields["topic"], atoiOr(req.ExtFields["queueId"], -1)
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.topics[topic]
	if ts == nil || q < 0 || q >= len(ts.queues) {
		return reply{resp: response(CodeTopicNotExist, "topic["+topic+"] not exist, apply first please!")}, true
	}
	msgs := ts.queues[q]
	var off int64
	switch req.Code {
	case ReqGetMaxOffset:
		off = int64(len(msgs))
	case ReqGetMinOffset:
		off = 0
	case ReqSearchOffsetByTimestamp:
		// The first message stored at or after the time (the broker's lower boundary), the
		// queue's end when there is none.
		at, _ := strconv.ParseInt(req.ExtFields["timestamp"], 10, 64)
		off = int64(sort.Search(len(msgs), func(i int) bool { return msgs[i].StoredAt.UnixMilli() >= at }))
	}
	r := response(CodeSuccess, "")
	r.ExtFields = map[string]string{"offset": strconv.FormatInt(off, 10)}
	return reply{resp: r}, true
}

// handlePull answers PULL_MESSAGE from queueOffset with at most maxMsgNums messages encoded as
// a broker stores them (MessageDecoder's layout), or PULL_NOT_FOUND at the queue's end. A
// consumer's pull (sysFlag) also commits its group's offset, and at the queue's end it is
// suspended (long polling) until a message is stored or its suspend time is up.
func (c *Cluster) handlePull(req *command) reply {
	c.commitPulledOffset(req)
	r, changed := c.pullOnce(req)
	timeout, ok := suspendTime(req)
	if changed == nil || !ok || req.conn == nil {
		return r
	}
	return reply{wait: func(done <-chan struct{}) *command {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-changed:
		case <-t.C:
		case <-done:
			return nil
		}
		r, _ := c.pullOnce(req)
		return r.resp
	}}
}

// pullOnce is one look at the queue; changed, when it found nothing new, is closed at the next
// store.
func (c *Cluster) pullOnce(req *command) (r reply, changed chan struct{}) {
	f := req.ExtFields
	topic, q := f["topic"], atoiOr(f["queueId"], -1)
	off := int64(atoiOr(f["queueOffset"], 0))
	n := min(max(atoiOr(f["maxMsgNums"], maxPullMessages), 1), maxPullMessages)
	c.mu.Lock()
	defer c.mu.Unlock()
	// Without the flag the broker takes the subscription from the group's heartbeat (a push
	// consumer's pulls carry none by default); a reader that never sent one has none.
	if atoiOr(f["sysFlag"], 0)&pullFlagSubscription == 0 && !c.subscribedLocked(f["consumerGroup"], topic) {
		return reply{resp: response(CodeSubscriptionNotExist, "the consumer's group info not exist")}, nil
	}
	ts := c.topics[topic]
	if ts == nil || q < 0 || q >= len(ts.queues) {
		return reply{resp: response(CodeTopicNotExist, "topic["+topic+"] not exist, apply first please!")}, nil
	}
	msgs := ts.queues[q]
	ext := map[string]string{"minOffset": "0", "maxOffset": strconv.Itoa(len(msgs)), "suggestWhichBrokerId": "0"}
	if off < 0 || off >= int64(len(msgs)) {
		ext["nextBeginOffset"] = strconv.Itoa(len(msgs))
		resp := response(CodePullNotFound, "no new message")
		resp.ExtFields = ext
		return reply{resp: resp}, c.changed
	}
	end := min(off+int64(n), int64(len(msgs)))
	var body bytes.Buffer
	for _, m := range msgs[off:end] {
		body.Write(c.encodeStored(m))
	}
	ext["nextBeginOffset"] = strconv.FormatInt(end, 10)
	resp := response(CodeSuccess, "FOUND")
	resp.ExtFields = ext
	resp.Body = body.Bytes()
	return reply{resp: resp}, nil
}

// encodeStored is m in the commit log's layout, as MessageDecoder reads it: TOTALSIZE MAGIC
// BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST(4+4)
// STORETIMESTAMP STOREHOST(4+4) RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLEN BODY
// TOPICLEN(1) TOPIC PROPERTIESLEN(2) PROPERTIES. Bodies go uncompressed (sysFlag 0).
func (c *Cluster) encodeStored(m Message) []byte {
	var props strings.Builder
	keys := make([]string, 0, len(m.Properties))
	for k := range m.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		props.WriteString(k)
		props.WriteByte(nameValueSep)
		props.WriteString(m.Properties[k])
		props.WriteByte(propertySep)
	}
	b := make([]byte, 4, 128+len(m.Body)+props.Len())
	b = binary.BigEndian.AppendUint32(b, 0xdaa320a7)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(m.Body))
	b = binary.BigEndian.AppendUint32(b, uint32(m.Queue))
	b = binary.BigEndian.AppendUint32(b, uint32(m.Flag))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(m.CommitLogOffset))
	b = binary.BigEndian.AppendUint32(b, 0) // sysFlag
	b = binary.BigEndian.AppendUint64(b, uint64(m.BornTime.UnixMilli()))
	b = append(b, 127, 0, 0, 1)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(m.StoredAt.UnixMilli()))
	b = append(b, 127, 0, 0, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(c.brokerPort))
	b = binary.BigEndian.AppendUint32(b, uint32(m.ReconsumeTimes))
	b = binary.BigEndian.AppendUint64(b, 0) // prepared transaction offset
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Body)))
	b = append(b, m.Body...)
	b = append(b, byte(len(m.Topic)))
	b = append(b, m.Topic...)
	b = binary.BigEndian.AppendUint16(b, uint16(props.Len()))
	b = append(b, props.String()...)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

func atoiOr(s string, def int) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return v
}

// Lose removes topic's stored messages that match, as if the broker had never stored them (a
// lost commit log tail, a queue that was wiped), renumbering each queue's offsets, and returns
// how many it removed. For tests of readers that must notice the gap. Match runs with the
// cluster's lock held: it must not call Cluster methods.
func (c *Cluster) Lose(topic string, match func(Message) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.topics[topic]
	if ts == nil {
		return 0
	}
	n := 0
	for q, msgs := range ts.queues {
		kept := msgs[:0]
		for _, m := range msgs {
			if match(m) {
				n++
				continue
			}
			m.Offset = int64(len(kept))
			kept = append(kept, m)
		}
		ts.queues[q] = kept
	}
	return n
}
