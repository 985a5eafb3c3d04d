package reconcile

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/router"
	rmqsink "github.com/outboxd/outboxd/sink/rocketmq"
)

// RocketMQ remoting request and response codes (RequestCode, ResponseCode).
const (
	rmqPullMessage      = 11
	rmqSearchOffsetTime = 29
	rmqGetMaxOffset     = 30
	rmqGetMinOffset     = 31
	rmqGetRouteInfo     = 105

	rmqSuccess        = 0
	rmqTopicNotExist  = 17
	rmqPullNotFound   = 19
	rmqPullRetryNow   = 20
	rmqPullOffsetMove = 21

	// pullFlagSubscription is PullSysFlag.FLAG_SUBSCRIPTION.
	pullFlagSubscription = 0x4
)

// ReconcileGroup is the consumer group named in pull requests. The pulls commit no offset
// (no FLAG_COMMIT_OFFSET, commitOffset 0), but a broker with ACL needs SUB permission for this group and
// the topics, and one without autoCreateSubscriptionGroup needs the group created
// (mqadmin updateSubGroup -g outboxd-reconcile).
const ReconcileGroup = "outboxd-reconcile"

// RocketMQConfig is how a RocketMQReader reaches the cluster: the sink's settings.
type RocketMQConfig struct {
	NameServers []string
	Namespace   string
	// AccessKey and SecretKey sign every request (RocketMQ's plain ACL) when set.
	AccessKey, SecretKey string
	Timeout              time.Duration
}

// RocketMQReader is a Reader for one RocketMQ cluster. It speaks the remoting protocol itself
// (the client library's pull consumer registers with the brokers and commits offsets when it
// shuts down; this sends only route lookups, offset searches and pulls). RocketMQ has no
// producer timestamp: the window is the store time, which comes after the commit by the
// relay's lag.
type RocketMQReader struct {
	cfg    RocketMQConfig
	opaque atomic.Int32
}

// NewRocketMQReader returns a reader; it does not contact the cluster.
func NewRocketMQReader(c RocketMQConfig) *RocketMQReader {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	return &RocketMQReader{cfg: c}
}

// Close implements Reader; every Count uses connections of its own.
func (r *RocketMQReader) Close() error { return nil }

// Count implements Reader: for each queue of the topic on each broker it searches the offset
// of from by store time and pulls from there until a message stored at or after to, or the
// queue's end as it was when the search was made. Store times only grow within a queue.
func (r *RocketMQReader) Count(ctx context.Context, topic string, from, to time.Time, counts map[string]int) error {
	return r.CountTable(ctx, topic, "", from, to, counts)
}

// CountTable implements TableReader: Count of the messages whose outbox_table property is
// table.
func (r *RocketMQReader) CountTable(ctx context.Context, topic, table string, from, to time.Time, counts map[string]int) error {
	tl := tally{table: table, counts: counts}
	if r.cfg.Namespace != "" {
		topic = r.cfg.Namespace + "%" + topic
	}
	route, err := r.route(ctx, topic)
	if err != nil || route == nil {
		return err
	}
	for _, b := range route.BrokerDatas {
		queues := 0
		for _, q := range route.QueueDatas {
			if q.BrokerName == b.BrokerName {
				queues = q.ReadQueueNums
			}
		}
		addr := b.BrokerAddrs["0"] // the master
		if addr == "" {
			if queues == 0 {
				continue
			}
			// Skipping it would count nothing there and report every message it holds
			// missing: the check cannot be completed now.
			return fmt.Errorf("broker %s has no master in the route (down?): its %d queues of %s cannot be read; run reconcile again when it is back", b.BrokerName, queues, topic)
		}
		if err := r.countBroker(ctx, addr, topic, queues, from, to, tl); err != nil {
			return fmt.Errorf("broker %s (%s): %w", b.BrokerName, addr, err)
		}
	}
	return nil
}

type rmqRoute struct {
	BrokerDatas []struct {
		BrokerName  string            `json:"brokerName"`
		BrokerAddrs map[string]string `json:"brokerAddrs"`
	} `json:"brokerDatas"`
	QueueDatas []struct {
		BrokerName    string `json:"brokerName"`
		ReadQueueNums int    `json:"readQueueNums"`
	} `json:"queueDatas"`
}

// fastjsonIntKey finds the unquoted integer map keys a Java NameServer writes ({0:"host"}).
var fastjsonIntKey = regexp.MustCompile(`([{,])\s*(-?\d+)\s*:`)

// route asks the NameServers in turn; nil without error when the topic does not exist.
func (r *RocketMQReader) route(ctx context.Context, topic string) (*rmqRoute, error) {
	var lastErr error
	for _, ns := range r.cfg.NameServers {
		c, err := r.dial(ctx, ns)
		if err != nil {
			lastErr = err
			continue
		}
		resp, err := c.call(rmqGetRouteInfo, map[string]string{"topic": topic})
		c.Close()
		if err != nil {
			lastErr = err
			continue
		}
		switch resp.Code {
		case rmqSuccess:
		case rmqTopicNotExist:
			return nil, nil
		default:
			return nil, fmt.Errorf("NameServer %s: route of %s: code %d: %s", ns, topic, resp.Code, resp.Remark)
		}
		var rt rmqRoute
		if err := json.Unmarshal(fastjsonIntKey.ReplaceAll(resp.Body, []byte(`$1"$2":`)), &rt); err != nil {
			return nil, fmt.Errorf("NameServer %s: route of %s: %w", ns, topic, err)
		}
		return &rt, nil
	}
	return nil, fmt.Errorf("no NameServer answered: %w", lastErr)
}

func (r *RocketMQReader) countBroker(ctx context.Context, addr, topic string, queues int, from, to time.Time, tl tally) error {
	c, err := r.dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	for q := range queues {
		qid := strconv.Itoa(q)
		minOff, err := c.offset(rmqGetMinOffset, map[string]string{"topic": topic, "queueId": qid})
		if err != nil {
			return err
		}
		maxOff, err := c.offset(rmqGetMaxOffset, map[string]string{"topic": topic, "queueId": qid})
		if err != nil {
			return err
		}
		start, err := c.offset(rmqSearchOffsetTime, map[string]string{"topic": topic, "queueId": qid, "timestamp": strconv.FormatInt(from.UnixMilli(), 10)})
		if err != nil {
			return err
		}
		// Brokers differ in what the search answers past the queue's ends; the store times
		// checked below make a start that is too early harmless.
		start = min(max(start, minOff), maxOff)
		if err := c.pullQueue(ctx, topic, q, start, maxOff, to, tl); err != nil {
			return fmt.Errorf("queue %d: %w", q, err)
		}
	}
	return nil
}

// pullQueue pulls queue q from offset start until end or the first message stored at or
// after to.
func (c *rmqConn) pullQueue(ctx context.Context, topic string, q int, start, end int64, to time.Time, tl tally) error {
	for off := start; off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := c.call(rmqPullMessage, map[string]string{
			"consumerGroup": ReconcileGroup, "topic": topic, "queueId": strconv.Itoa(q),
			"queueOffset": strconv.FormatInt(off, 10), "maxMsgNums": "256",
			// sysFlag FLAG_SUBSCRIPTION only: the pull carries its subscription ("*"), since
			// without it the broker looks the subscription up in the group's heartbeat
			// registration, which a reader that never registers lacks (the broker answers
			// SUBSCRIPTION_NOT_EXIST, PullMessageProcessor); no FLAG_COMMIT_OFFSET, no FLAG_SUSPEND
			// (no long polling).
			"sysFlag": strconv.Itoa(pullFlagSubscription), "commitOffset": "0", "suspendTimeoutMillis": "0",
			"subscription": "*", "subVersion": "0", "expressionType": "TAG",
		})
		if err != nil {
			return err
		}
		next, perr := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		switch resp.Code {
		case rmqSuccess:
		case rmqPullNotFound:
			return nil
		case rmqPullRetryNow, rmqPullOffsetMove:
			if perr != nil || next <= off {
				return fmt.Errorf("pull at offset %d: code %d without a later nextBeginOffset", off, resp.Code)
			}
			off = next
			continue
		default:
			return fmt.Errorf("pull at offset %d: code %d: %s", off, resp.Code, resp.Remark)
		}
		// Store times are whole milliseconds: a message of to's millisecond may be before to.
		stop := to.Add(time.Millisecond - 1).UnixMilli()
		for _, m := range primitive.DecodeMessage(resp.Body) {
			if m.QueueOffset < off {
				continue
			}
			if m.StoreTimestamp >= stop || m.QueueOffset >= end {
				return nil
			}
			if id, table, ok := eventID(m); ok {
				tl.add(id, table)
			}
		}
		if perr != nil || next <= off {
			return fmt.Errorf("pull at offset %d: nextBeginOffset %q does not advance", off, resp.ExtFields["nextBeginOffset"])
		}
		off = next
	}
	return nil
}

// eventID is the message's event_id header and the table that sent it (its outbox_table
// header), decoded as the sink encoded them.
func eventID(m *primitive.MessageExt) (id, table string, ok bool) {
	_, headers, err := rmqsink.DecodeProperties(m.GetProperties())
	if err != nil {
		return "", "", false
	}
	var haveID, haveTable bool
	for _, h := range headers {
		switch {
		case h.Key == router.HeaderEventID && !haveID:
			id, haveID = string(h.Value), true
		case h.Key == router.HeaderTable && !haveTable:
			table, haveTable = string(h.Value), true
		}
	}
	return id, table, haveID
}

// rmqConn is one remoting connection, used for one request at a time.
type rmqConn struct {
	net.Conn
	r       *RocketMQReader
	timeout time.Duration
}

type rmqCommand struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
	Body      []byte            `json:"-"`
}

func (r *RocketMQReader) dial(ctx context.Context, addr string) (*rmqConn, error) {
	d := net.Dialer{Timeout: r.cfg.Timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &rmqConn{Conn: nc, r: r, timeout: r.cfg.Timeout}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	return c, nil
}

// offset sends a request answered with ext field "offset".
func (c *rmqConn) offset(code int, ext map[string]string) (int64, error) {
	resp, err := c.call(code, ext)
	if err != nil {
		return 0, err
	}
	if resp.Code != rmqSuccess {
		return 0, fmt.Errorf("request %d (queue %s): code %d: %s", code, ext["queueId"], resp.Code, resp.Remark)
	}
	v, err := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("request %d (queue %s): offset %q: %w", code, ext["queueId"], resp.ExtFields["offset"], err)
	}
	return v, nil
}

// call sends one request with a JSON header and reads its answer. It blocks up to the
// configured timeout.
func (c *rmqConn) call(code int, ext map[string]string) (*rmqCommand, error) {
	req := rmqCommand{Code: code, Language: "GO", Version: 317, Opaque: c.r.opaque.Add(1), ExtFields: ext}
	if c.r.cfg.AccessKey != "" {
		sign(&req, c.r.cfg.AccessKey, c.r.cfg.SecretKey)
	}
	header, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(req.Body)))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(header))) // serialize type 0: JSON
	frame = append(append(frame, header...), req.Body...)
	_ = c.SetDeadline(time.Now().Add(c.timeout))
	if _, err := c.Write(frame); err != nil {
		return nil, err
	}
	for {
		resp, err := readCommand(c)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", code, err)
		}
		if resp.Opaque == req.Opaque && resp.Flag&1 != 0 {
			return resp, nil
		}
	}
}

// sign adds RocketMQ plain ACL's AccessKey and Signature: base64(HMAC-SHA1(secret, the values
// of the other ext fields in key order, then the body)).
func sign(req *rmqCommand, ak, sk string) {
	ext := make(map[string]string, len(req.ExtFields)+2)
	for k, v := range req.ExtFields {
		ext[k] = v
	}
	ext["AccessKey"] = ak
	keys := make([]string, 0, len(ext))
	for k := range ext {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	mac := hmac.New(sha1.New, []byte(sk))
	for _, k := range keys {
		mac.Write([]byte(ext[k]))
	}
	mac.Write(req.Body)
	ext["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	req.ExtFields = ext
}

// maxRMQFrame bounds a response (a broker's default remotingServerMaxFrameSize is 16 MiB).
const maxRMQFrame = 64 << 20

func readCommand(r io.Reader) (*rmqCommand, error) {
	var lb [8]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(lb[:4])
	word := binary.BigEndian.Uint32(lb[4:])
	hlen := word & 0xFFFFFF
	if n > maxRMQFrame || n < 4 || hlen > n-4 {
		return nil, fmt.Errorf("bad frame: length %d, header %d", n, hlen)
	}
	buf := make([]byte, n-4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	if ser := word >> 24; ser != 0 {
		return nil, fmt.Errorf("response header in serialize type %d; only JSON (0) is read", ser)
	}
	var cmd rmqCommand
	var raw struct {
		rmqCommand
		Language json.RawMessage `json:"language"`
	}
	if err := json.Unmarshal(buf[:hlen], &raw); err != nil {
		return nil, fmt.Errorf("response header: %w", err)
	}
	cmd = raw.rmqCommand
	cmd.Body = buf[hlen:]
	return &cmd, nil
}
