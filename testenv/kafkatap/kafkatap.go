// Package kafkatap puts a recording fault proxy in front of a kfake broker: kfake advertises the
// proxy's address in its metadata, so every Kafka client (a producer dials the partition leader
// it learns from metadata, not its seed) reaches the broker through the proxy, and the proxy
// records the header of each client request it forwarded: when, on which connection, the API
// key and version, the correlation id and the client id.
//
// Attribution is by client id (each relay instance under test sets its own `client_id`), not
// by proxy: one broker advertises one address, so a proxy per client would have to rewrite
// metadata answers. The client id is in the header of every request, whatever its version.
package kafkatap

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outboxd/testenv/faultproxy"
)

// Produce is the Produce request's API key.
const Produce int16 = 0

// Request is one client request the proxy forwarded to the broker.
type Request struct {
	Conn          uint64
	APIKey        int16
	APIVersion    int16
	CorrelationID int32
	ClientID      string
	// Began is when its first byte was forwarded; Forwarded when its last was (from then on
	// the broker can act on it).
	Began, Forwarded time.Time
}

// Tap is the recording proxy. Its methods are safe for concurrent use.
type Tap struct {
	Proxy *faultproxy.Proxy

	mu    sync.Mutex
	reqs  []Request
	conns map[uint64]*frameReader
}

// New starts a tap forwarding to target (the broker's real address). It does not block.
func New(target string) (*Tap, error) {
	t := &Tap{conns: map[uint64]*frameReader{}}
	p, err := faultproxy.NewTapped(target, t.observe)
	if err != nil {
		return nil, err
	}
	t.Proxy = p
	return t, nil
}

// Addr is the proxy's address: the one to advertise and to give clients as a seed.
func (t *Tap) Addr() string { return t.Proxy.Addr() }

// Close closes the proxy. Idempotent.
func (t *Tap) Close() error { return t.Proxy.Close() }

func (t *Tap) observe(c faultproxy.Chunk) {
	if c.Dir != faultproxy.Upstream {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fr := t.conns[c.Conn]
	if fr == nil {
		fr = &frameReader{}
		t.conns[c.Conn] = fr
	}
	for _, r := range fr.feed(c.Data, c.At) {
		r.Conn = c.Conn
		t.reqs = append(t.reqs, r)
	}
}

// Requests returns every request forwarded so far, in the order their last bytes were.
func (t *Tap) Requests() []Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Request(nil), t.reqs...)
}

// Produces returns the Produce requests of clientID forwarded at or after since (the zero time:
// all of them).
func (t *Tap) Produces(clientID string, since time.Time) []Request {
	var out []Request
	for _, r := range t.Requests() {
		if r.APIKey == Produce && r.ClientID == clientID && !r.Forwarded.Before(since) {
			out = append(out, r)
		}
	}
	return out
}

// frameReader follows one connection's client-to-broker byte stream: each request is an int32
// size, then (request header v1/v2) int16 api_key, int16 api_version, int32 correlation_id and
// client_id as an int16-length nullable string (not compact even in flexible versions).
type frameReader struct {
	hdr     []byte // the current frame's first bytes, up to the end of its client id
	left    int    // bytes of the current frame still to come; -1 while the size is unread
	parsed  bool
	cur     Request
	started bool
}

// headerMax bounds what is buffered per frame: the fixed part and a client id of up to 64 KiB.
const headerMax = 4 + 10 + 2 + 1<<16

func (f *frameReader) feed(b []byte, at time.Time) []Request {
	var done []Request
	for len(b) > 0 {
		if !f.started {
			f.started, f.left, f.parsed, f.hdr, f.cur = true, -1, false, f.hdr[:0], Request{Began: at}
		}
		if f.left < 0 {
			n := min(4-len(f.hdr), len(b))
			f.hdr = append(f.hdr, b[:n]...)
			b = b[n:]
			if len(f.hdr) < 4 {
				return done
			}
			f.left = int(int32(binary.BigEndian.Uint32(f.hdr)))
			if f.left < 0 {
				f.left = 0 // a corrupt size: count the frame as empty rather than stall
			}
		}
		n := min(f.left, len(b))
		if !f.parsed && len(f.hdr) < headerMax {
			f.hdr = append(f.hdr, b[:min(n, headerMax-len(f.hdr))]...)
			f.parse()
		}
		b = b[n:]
		f.left -= n
		if f.left == 0 {
			f.parse()
			f.cur.Forwarded = at
			done = append(done, f.cur)
			f.started = false
		}
	}
	return done
}

// parse fills cur from hdr once the header is complete.
func (f *frameReader) parse() {
	if f.parsed || len(f.hdr) < 4+10 {
		return
	}
	h := f.hdr[4:]
	f.cur.APIKey = int16(binary.BigEndian.Uint16(h[0:]))
	f.cur.APIVersion = int16(binary.BigEndian.Uint16(h[2:]))
	f.cur.CorrelationID = int32(binary.BigEndian.Uint32(h[4:]))
	l := int(int16(binary.BigEndian.Uint16(h[8:])))
	if l < 0 {
		f.parsed = true // a null client id
		return
	}
	if len(h) < 10+l {
		return
	}
	f.cur.ClientID = string(h[10 : 10+l])
	f.parsed = true
}

// advertised makes kfake advertise addr in its metadata while it listens elsewhere.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// Advertise is a kfake option that makes the broker advertise addr (a tap's or proxy's) instead
// of the address it listens on.
func Advertise(addr string) (kfake.Opt, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("advertised address %s: %w", addr, err)
	}
	return kfake.ListenFn(func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return advertised{Listener: ln, addr: ta}, nil
	}), nil
}

// Start starts a one-broker kfake cluster on a free loopback port behind a new tap, with opts
// added (such as kfake.SeedTopics). The cluster's ListenAddrs is the tap. On error nothing is
// left running.
func Start(opts ...kfake.Opt) (*kfake.Cluster, *Tap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("pick a port for kfake: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tap, err := New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, nil, err
	}
	adv, err := Advertise(tap.Addr())
	if err != nil {
		tap.Close()
		return nil, nil, err
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), adv}, opts...)...)
	if err != nil {
		tap.Close()
		return nil, nil, fmt.Errorf("start kfake on port %d: %w", port, err)
	}
	return c, tap, nil
}
