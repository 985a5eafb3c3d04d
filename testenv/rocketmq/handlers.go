package rocketmq

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

func (c *Cluster) handleNameServer(req *command) reply {
	c.count(req.Code)
	switch req.Code {
	case ReqGetRouteInfo:
		return reply{resp: c.routeResponse(req.ExtFields["topic"])}
	default:
		c.logf("namesrv: answering SUCCESS to unhandled request code %d", req.Code)
		return reply{resp: response(CodeSuccess, "")}
	}
}

// routeResponse answers GET_ROUTEINFO_BY_TOPIC. The body is written the way
// a Java NameServer's fastjson writes it: brokerAddrs has unquoted integer
// keys ({0:"127.0.0.1:10911"}), which is not JSON; the Go client parses that
// map by hand, so reproducing it keeps the test honest.
func (c *Cluster) routeResponse(topic string) *command {
	c.mu.Lock()
	queues := 0
	if strings.HasPrefix(topic, "%RETRY%") {
		// A broker creates a group's retry topic at its first heartbeat; the client looks its
		// route up just before that, at start, and would otherwise wait for its next route
		// refresh (30 s) to pull redeliveries.
		c.createTopicLocked(topic, 1)
	}
	if ts := c.topics[topic]; ts != nil {
		queues = len(ts.queues)
	} else if topic == defaultTopicKey && c.opts.AutoCreateTopics {
		queues = c.opts.Queues
	}
	port := c.brokerPort
	host := c.opts.BrokerHost
	c.mu.Unlock()
	if host == "" {
		host = "127.0.0.1"
	}
	if queues == 0 {
		return response(CodeTopicNotExist, "No topic route info in name server for the topic: "+topic+
			"\nSee http://rocketmq.apache.org/docs/faq/ for further details.")
	}
	body := fmt.Sprintf(`{"brokerDatas":[{"brokerAddrs":{0:"%s:%d"},"brokerName":%q,"cluster":%q,"enableActingMaster":false}],`+
		`"filterServerTable":{},"queueDatas":[{"brokerName":%q,"perm":6,"readQueueNums":%d,"topicSysFlag":0,"writeQueueNums":%d}]}`,
		host, port, BrokerName, ClusterName, BrokerName, queues, queues)
	r := response(CodeSuccess, "")
	r.Body = []byte(body)
	return r
}

func (c *Cluster) handleBroker(req *command) reply {
	c.count(req.Code)
	if c.opts.ACL != nil {
		if err := c.checkSignature(req); err != nil {
			c.logf("broker: ACL: rejecting request code %d: %v", req.Code, err)
			return reply{resp: response(CodeSystemError, err.Error())}
		}
	}
	switch req.Code {
	case ReqSendMessage, ReqSendMessageV2, ReqSendBatchMessage:
		return c.handleSend(req)
	default:
		if r, ok := c.handleRead(req); ok {
			return r
		}
		if r, ok := c.handleConsumer(req); ok {
			return r
		}
		c.logf("broker: answering SUCCESS to unhandled request code %d", req.Code)
		return reply{resp: response(CodeSuccess, "")}
	}
}

// checkSignature verifies what the client's ACL interceptor adds: AccessKey
// and Signature = base64(HMAC-SHA1(secret, values of all other ext fields in
// key order, then the body)).
func (c *Cluster) checkSignature(req *command) error {
	ak, sig := req.ExtFields["AccessKey"], req.ExtFields["Signature"]
	if ak == "" || sig == "" {
		return fmt.Errorf("AclException: no accessKey or signature in request code %d", req.Code)
	}
	if ak != c.opts.ACL.AccessKey {
		return fmt.Errorf("AclException: no acl config for %s", ak)
	}
	keys := make([]string, 0, len(req.ExtFields))
	for k := range req.ExtFields {
		if k != "Signature" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	mac := hmac.New(sha1.New, []byte(c.opts.ACL.SecretKey))
	for _, k := range keys {
		mac.Write([]byte(req.ExtFields[k]))
	}
	mac.Write(req.Body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return fmt.Errorf("AclException: check signature failed for accessKey=%s", ak)
	}
	return nil
}

// sendHeader is SendMessageRequestHeader, from either its long (code 10) or
// its single-letter V2 form (310, 320).
type sendHeader struct {
	topic          string
	queueID        int
	sysFlag        int
	bornTimestamp  int64
	flag           int32
	properties     string
	defaultQueues  int
	batch          bool
	producerGroup  string
	reconsumeTimes int
}

func parseSendHeader(req *command) (sendHeader, error) {
	f := req.ExtFields
	get := func(long, short string) string {
		if v, ok := f[long]; ok {
			return v
		}
		return f[short]
	}
	var h sendHeader
	h.topic = get("topic", "b")
	if h.topic == "" {
		return h, fmt.Errorf("send request without topic")
	}
	h.producerGroup = get("producerGroup", "a")
	h.properties = get("properties", "i")
	var err error
	atoi := func(name, s string) int64 {
		if s == "" || err != nil {
			return 0
		}
		v, e := strconv.ParseInt(s, 10, 64)
		if e != nil {
			err = fmt.Errorf("send request field %s=%q: %w", name, s, e)
		}
		return v
	}
	h.queueID = int(atoi("queueId", get("queueId", "e")))
	h.sysFlag = int(atoi("sysFlag", get("sysFlag", "f")))
	h.bornTimestamp = atoi("bornTimestamp", get("bornTimestamp", "g"))
	h.flag = int32(atoi("flag", get("flag", "h")))
	h.defaultQueues = int(atoi("defaultTopicQueueNums", get("defaultTopicQueueNums", "d")))
	h.reconsumeTimes = int(atoi("reconsumeTimes", get("reconsumeTimes", "j")))
	h.batch = get("batch", "m") == "true" || req.Code == ReqSendBatchMessage
	return h, err
}

func (c *Cluster) handleSend(req *command) reply {
	h, err := parseSendHeader(req)
	if err != nil {
		return reply{resp: response(CodeMessageIllegal, err.Error())}
	}
	if len(req.Body) > c.opts.MaxMessageSize {
		return reply{resp: response(CodeMessageIllegal,
			fmt.Sprintf("the message body size over max value, MAX: %d", c.opts.MaxMessageSize))}
	}
	born := time.UnixMilli(h.bornTimestamp)
	var msgs []Message
	if req.Code == ReqSendBatchMessage {
		items, err := decodeBatch(req.Body)
		if err != nil {
			c.logf("broker: illegal batch body: %v", err)
			return reply{resp: response(CodeMessageIllegal, "the message body is illegal: "+err.Error())}
		}
		for _, it := range items {
			m := newMessage(h.topic, it.Body, it.Properties, it.Flag, born)
			m.Batch = true
			msgs = append(msgs, m)
		}
	} else {
		body := req.Body
		if h.sysFlag&sysFlagCompressed != 0 {
			body, err = inflate(req.Body, int64(c.opts.MaxMessageSize)*16)
			if err != nil {
				c.logf("broker: topic %s: %v", h.topic, err)
				return reply{resp: response(CodeMessageIllegal, err.Error())}
			}
		}
		msgs = append(msgs, newMessage(h.topic, body, parseProperties(h.properties), h.flag, born))
	}

	c.mu.Lock()
	ts := c.topics[h.topic]
	if ts == nil {
		if !c.opts.AutoCreateTopics {
			c.mu.Unlock()
			return reply{resp: response(CodeTopicNotExist,
				fmt.Sprintf("topic[%s] not exist, apply first please! See http://rocketmq.apache.org/docs/faq/ for further details.", h.topic))}
		}
		// A real broker creates the topic from the TBW102 template, capped at
		// the client's defaultTopicQueueNums.
		n := c.opts.Queues
		if h.defaultQueues > 0 && h.defaultQueues < n {
			n = h.defaultQueues
		}
		ts = c.createTopicLocked(h.topic, n)
		c.logf("broker: auto-created topic %s with %d queues", h.topic, n)
	}
	if h.queueID < 0 || h.queueID >= len(ts.queues) {
		nq := len(ts.queues)
		c.mu.Unlock()
		return reply{resp: response(CodeSystemError,
			fmt.Sprintf("request queueId[%d] is illegal, topic[%s] writeQueueNums[%d]", h.queueID, h.topic, nq))}
	}
	for i := range msgs {
		msgs[i].Queue = h.queueID
	}
	fault := c.matchFaultLocked(h.topic, msgs)
	// A SUCCESS answer (possibly delayed) implies the message is stored; a lost
	// or failed answer stores only when the fault says so.
	store := fault == nil || fault.Store || (fault.Code == CodeSuccess && !fault.Drop && !fault.NoReply)
	ext := map[string]string{"queueId": strconv.Itoa(h.queueID)}
	if store {
		ids := c.storeLocked(ts, msgs)
		ext["msgId"] = strings.Join(ids, ",")
		ext["queueOffset"] = strconv.FormatInt(msgs[0].Offset, 10)
		ext["MSG_REGION"] = "DefaultRegion"
		ext["TRACE_ON"] = "true"
	}
	c.mu.Unlock()

	if fault == nil {
		r := response(CodeSuccess, "")
		r.ExtFields = ext
		return reply{resp: r}
	}
	c.logf("broker: fault on topic %s queue %d (%d message(s), stored=%v): code=%d delay=%s drop=%v noReply=%v",
		h.topic, h.queueID, len(msgs), store, fault.Code, fault.Delay, fault.Drop, fault.NoReply)
	r := response(fault.Code, fault.Remark)
	switch fault.Code {
	case CodeSuccess, CodeFlushDiskTimeout, CodeSlaveNotAvailable, CodeFlushSlaveTimeout:
		r.ExtFields = ext
	default:
		if r.Remark == "" {
			r.Remark = defaultRemark(fault.Code, h.topic)
		}
	}
	return reply{resp: r, delay: fault.Delay, drop: fault.Drop, noReply: fault.NoReply}
}

func newMessage(topic string, body []byte, props map[string]string, flag int32, born time.Time) Message {
	return Message{
		Topic: topic, Body: body, Properties: props, Flag: flag, BornTime: born,
		Keys: props["KEYS"], Tags: props["TAGS"], MsgID: props["UNIQ_KEY"],
	}
}

// matchFaultLocked returns the first fault matching the request and consumes
// one of its uses.
func (c *Cluster) matchFaultLocked(topic string, msgs []Message) *Fault {
	for _, e := range c.faults {
		if e.f.Topic != "" && e.f.Topic != topic {
			continue
		}
		if e.f.Match != nil {
			hit := false
			for _, m := range msgs {
				if e.f.Match(m) {
					hit = true
					break
				}
			}
			if !hit {
				continue
			}
		}
		f := e.f
		if f.Count > 0 {
			e.remaining--
			if e.remaining <= 0 {
				c.removeFaultLocked(e.id)
			}
		}
		return &f
	}
	return nil
}

// storeLocked appends msgs to their queue and returns their offset message ids.
func (c *Cluster) storeLocked(ts *topicState, msgs []Message) []string {
	now := time.Now()
	ids := make([]string, 0, len(msgs))
	c.sendSeq++
	for i := range msgs {
		m := &msgs[i]
		m.Request = c.sendSeq
		q := m.Queue
		m.Offset = int64(len(ts.queues[q]))
		m.StoredAt = now
		m.OffsetMsgID = c.offsetMsgIDLocked()
		m.CommitLogOffset = c.commitOffset
		if m.MsgID == "" {
			m.MsgID = m.OffsetMsgID
		}
		// Rough size of the stored record, so commit log offsets look real.
		c.commitOffset += int64(len(m.Body)) + 128
		ts.queues[q] = append(ts.queues[q], *m)
		ids = append(ids, m.OffsetMsgID)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return ids
}

// offsetMsgIDLocked builds MessageDecoder.createMessageId: store host IPv4,
// port and commit log offset, upper-case hex.
func (c *Cluster) offsetMsgIDLocked() string {
	b := make([]byte, 16)
	copy(b, []byte{127, 0, 0, 1})
	binary.BigEndian.PutUint32(b[4:], uint32(c.brokerPort))
	binary.BigEndian.PutUint64(b[8:], uint64(c.commitOffset))
	return strings.ToUpper(hex.EncodeToString(b))
}

func defaultRemark(code int, topic string) string {
	switch code {
	case CodeSystemError:
		return "fault injected: system error"
	case CodeSystemBusy:
		return "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while"
	case CodeMessageIllegal:
		return "the message is illegal"
	case CodeServiceNotAvail:
		return "service not available now, maybe disk full"
	case CodeNoPermission:
		return "the broker[" + BrokerName + "] sending message is forbidden"
	case CodeTopicNotExist:
		return "topic[" + topic + "] not exist, apply first please!"
	default:
		return "fault injected: code " + strconv.Itoa(code)
	}
}
