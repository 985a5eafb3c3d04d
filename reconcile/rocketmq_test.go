package reconcile

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	rmqsink "github.com/outboxd/outboxd/sink/rocketmq"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// send delivers messages with event ids ids to topic through the real sink.
func send(t *testing.T, s *rmqsink.Sink, topic string, ids ...string) {
	t.Helper()
	msgs := make([]*sink.Message, len(ids))
	for i, id := range ids {
		msgs[i] = &sink.Message{Topic: topic, Key: []byte(id), Value: []byte("v"), EventID: id,
			Headers: []sink.Header{{Key: "event_id", Value: []byte(id)}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Send(ctx, msgs); err != nil {
		t.Fatal(err)
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// waitStoreTick returns the next whole millisecond after now and waits until the broker's
// millisecond store clock is past it: what was stored before is stored before it, what is
// sent after is stored after it.
func waitStoreTick() time.Time {
	b := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	for time.Now().UnixMilli() <= b.UnixMilli() {
		time.Sleep(time.Millisecond)
	}
	return b
}

// The RocketMQ reader against the test broker, messages sent by the real client: it pulls every
// queue from the offset of from (searched by store time) across pages of pulls, stops at to,
// counts copies, treats an unknown topic as empty, and signs its requests under ACL.
func TestRocketMQReaderWindow(t *testing.T) {
	acl := &rocketmq.ACL{AccessKey: "ak", SecretKey: "sk"}
	c, err := rocketmq.Start(rocketmq.Options{Topics: []string{"T"}, ACL: acl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := rmqsink.New("rmq", rmqsink.Config{NameServers: []string{c.NameServer()}, AccessKey: "ak", SecretKey: "sk"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	send(t, s, "T", ids("before", 5)...)
	from := waitStoreTick()
	in := ids("in", 150) // more than one pull (32 messages) per queue
	send(t, s, "T", in...)
	send(t, s, "T", "in7") // a resend
	to := waitStoreTick()
	send(t, s, "T", ids("after", 5)...)

	r := NewRocketMQReader(RocketMQConfig{NameServers: []string{c.NameServer()}, AccessKey: "ak", SecretKey: "sk", Timeout: 5 * time.Second})
	counts := map[string]int{"before0": 0, "after0": 0, "absent": 0}
	for _, id := range in {
		counts[id] = 0
	}
	if err := r.Count(context.Background(), "T", from, to, counts); err != nil {
		t.Fatal(err)
	}
	for _, id := range in {
		want := 1
		if id == "in7" {
			want = 2
		}
		if counts[id] != want {
			t.Errorf("%s counted %d, want %d", id, counts[id], want)
		}
	}
	for _, id := range []string{"before0", "after0", "absent"} {
		if counts[id] != 0 {
			t.Errorf("%s outside the window counted %d", id, counts[id])
		}
	}
	if err := r.Count(context.Background(), "NO_SUCH_TOPIC", from, to, counts); err != nil {
		t.Fatalf("unknown topic: %v", err)
	}

	bad := NewRocketMQReader(RocketMQConfig{NameServers: []string{c.NameServer()}, AccessKey: "ak", SecretKey: "wrong", Timeout: 5 * time.Second})
	if err := bad.Count(context.Background(), "T", from, to, map[string]int{"in0": 0}); err == nil {
		t.Fatal("a wrong secret key read the queues")
	}
	// Only reads reached the broker: route lookups, offset queries and pulls, no consumer
	// registration or offset commit.
	for code, n := range c.Requests() {
		switch code {
		case rocketmq.ReqSendMessage, rocketmq.ReqSendMessageV2, rocketmq.ReqSendBatchMessage, rocketmq.ReqHeartbeat, rocketmq.ReqUnregisterClient,
			rocketmq.ReqGetRouteInfo, rocketmq.ReqPullMessage, rocketmq.ReqSearchOffsetByTimestamp, rocketmq.ReqGetMaxOffset, rocketmq.ReqGetMinOffset:
		default:
			t.Errorf("request code %d seen %d times", code, n)
		}
	}
}

// fakeNameServer answers every GET_ROUTEINFO_BY_TOPIC with route, until the test ends.
func fakeNameServer(t *testing.T, route string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				for {
					req, err := readCommand(nc)
					if err != nil {
						return
					}
					header, _ := json.Marshal(rmqCommand{Code: rmqSuccess, Language: "JAVA", Opaque: req.Opaque, Flag: 1})
					frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(route)))
					frame = binary.BigEndian.AppendUint32(frame, uint32(len(header)))
					if _, err := nc.Write(append(append(frame, header...), route...)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A broker whose master is not in the route (down, only its slave registered) holds queues of
// the topic that cannot be read: Count fails (the check is incomplete), rather than count
// nothing there and have every message on it reported missing.
func TestRocketMQReaderBrokerWithoutMaster(t *testing.T) {
	ns := fakeNameServer(t, `{"brokerDatas":[{"brokerName":"broker-a","brokerAddrs":{1:"127.0.0.1:1"}}],`+
		`"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6}]}`)
	r := NewRocketMQReader(RocketMQConfig{NameServers: []string{ns}, Timeout: 2 * time.Second})
	err := r.Count(context.Background(), "T", time.Now().Add(-time.Hour), time.Now(), map[string]int{"a": 0})
	if err == nil || !strings.Contains(err.Error(), "broker-a") || !strings.Contains(err.Error(), "master") {
		t.Fatalf("Count over a broker without master = %v, want an error naming it", err)
	}
}
