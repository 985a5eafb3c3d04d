// Package faultproxy is a loopback TCP proxy for fault-injection tests: it forwards connections
// to a target and can, switched at runtime, refuse new connections, reset every open one, add
// latency, or blackhole traffic (accept, but never forward or answer). A Tap sees what was
// forwarded, for tests that attribute traffic (testenv/kafkatap).
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Mode is how the proxy treats traffic.
type Mode int

const (
	// Pass forwards traffic both ways.
	Pass Mode = iota
	// DropNew resets every new connection at once; open connections keep forwarding.
	DropNew
	// Blackhole accepts new connections but never dials the target, and stops forwarding on
	// open ones: bytes stay unread, nothing is answered. A connection that was blackholed is
	// reset when the mode leaves Blackhole, as a peer that timed out would find it broken.
	Blackhole
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case DropNew:
		return "drop_new"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Direction is which way a forwarded chunk went.
type Direction int

const (
	// Upstream is client to target.
	Upstream Direction = iota
	// Downstream is target to client.
	Downstream
)

// Chunk is bytes the proxy just forwarded, as a tap sees them.
type Chunk struct {
	// Conn numbers the proxied connection (1 for the first accepted), so a tap can keep a
	// parser per connection.
	Conn uint64
	Dir  Direction
	// Data is only valid during the tap call: a tap that keeps it must copy it.
	Data []byte
	// At is when the write to the other side returned.
	At time.Time
}

// Tap sees every chunk after it was forwarded. It is called from the connection's copier
// goroutine, concurrently for different connections and directions, and must not block.
type Tap func(Chunk)

// Proxy is a running proxy. All methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	tap    Tap

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	closed  bool
	conns   map[*pair]struct{}
	// accepted counts accepted connections, dropped ones included.
	accepted int
	// resume is closed and replaced when the mode leaves Blackhole, waking held copiers.
	resume chan struct{}
	wg     sync.WaitGroup
}

// pair is one proxied connection: the client's side and (once dialed) the target's.
type pair struct {
	id             uint64
	client, server net.Conn
	blackholed     bool
	once           sync.Once
}

func (p *pair) reset() {
	p.once.Do(func() {
		resetConn(p.client)
		if p.server != nil {
			resetConn(p.server)
		}
	})
}

// resetConn closes c with an RST rather than a FIN, as a crashed peer or a middlebox would.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Listen starts a proxy on addr ("127.0.0.1:0" picks a free port) forwarding to target, in
// Pass mode. It returns once it listens; on error nothing is left running.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fault proxy for %s: listen on %s: %w", target, addr, err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}, resume: make(chan struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// New starts a proxy on a free loopback port forwarding to target. See Listen.
func New(target string) (*Proxy, error) { return Listen("127.0.0.1:0", target) }

// NewTapped is New with tap called for every forwarded chunk, both ways (see Tap).
func NewTapped(target string, tap Tap) (*Proxy, error) {
	p, err := New(target)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.tap = tap
	p.mu.Unlock()
	return p, nil
}

// SetTarget makes new connections dial target (a virtual IP or DNS name that moves to another
// server); open ones stay on the old target until they close or ResetAll.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Addr is the proxy's "127.0.0.1:port". It does not block.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the mode for new and open connections. Leaving Blackhole resets the
// connections that were blackholed.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	prev := p.mode
	p.mode = m
	var broken []*pair
	if prev == Blackhole && m != Blackhole {
		for c := range p.conns {
			if c.blackholed {
				broken = append(broken, c)
			}
		}
		close(p.resume)
		p.resume = make(chan struct{})
	}
	if m == Blackhole {
		for c := range p.conns {
			c.blackholed = true
		}
	}
	p.mu.Unlock()
	for _, c := range broken {
		c.reset()
	}
}

// SetLatency delays every forwarded chunk, both ways, by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// ResetAll resets every open connection (RST to both sides) and returns how many it reset.
// The mode is unchanged.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	all := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.reset()
	}
	return len(all)
}

// Conns returns how many connections are open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns how many connections the proxy has accepted, dropped ones included.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops listening, resets every connection and waits for the proxy's goroutines.
// Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.resume)
	p.resume = make(chan struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a transient accept error (EMFILE): do not spin
			continue
		}
		p.mu.Lock()
		p.accepted++
		if p.closed || p.mode == DropNew {
			p.mu.Unlock()
			resetConn(c)
			continue
		}
		pr := &pair{id: uint64(p.accepted), client: c, blackholed: p.mode == Blackhole}
		p.conns[pr] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pr)
	}
}

// hold blocks while pr is blackholed and reports whether it may go on (false: it was reset
// or the proxy closed).
func (p *Proxy) hold(pr *pair) (time.Duration, bool) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, false
		}
		if !pr.blackholed {
			d := p.latency
			p.mu.Unlock()
			return d, true
		}
		if p.mode != Blackhole {
			// SetMode is resetting it.
			p.mu.Unlock()
			return 0, false
		}
		ch := p.resume
		p.mu.Unlock()
		<-ch
	}
}

func (p *Proxy) serve(pr *pair) {
	defer p.wg.Done()
	defer func() {
		pr.reset()
		p.mu.Lock()
		delete(p.conns, pr)
		p.mu.Unlock()
	}()
	if _, ok := p.hold(pr); !ok {
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return // the client sees a reset, as if the target refused it
	}
	p.mu.Lock()
	pr.server = s
	gone := p.closed
	p.mu.Unlock()
	if gone {
		resetConn(s)
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(pr, Upstream, s, pr.client); done <- struct{}{} }()
	go func() { p.copy(pr, Downstream, pr.client, s); done <- struct{}{} }()
	<-done // one direction ended: end both, as a proxy that lost a side does
	pr.reset()
	<-done
}

// copy forwards src to dst chunk by chunk, applying latency and blackholing before each write.
func (p *Proxy) copy(pr *pair, dir Direction, dst, src net.Conn) {
	p.mu.Lock()
	tap := p.tap
	p.mu.Unlock()
	buf := make([]byte, 32<<10)
	for {
		// Check before reading, so a blackholed connection leaves bytes unread.
		if _, ok := p.hold(pr); !ok {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			d, ok := p.hold(pr)
			if !ok {
				return
			}
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if tap != nil {
				tap(Chunk{Conn: pr.id, Dir: dir, Data: buf[:n], At: time.Now()})
			}
		}
		if err != nil {
			// EOF or a reset: serve tears down both sides, but not while blackholed: a
			// black hole passes on a peer's close no more than its bytes (the other side
			// would learn at once what a cut link hides until a timeout).
			p.hold(pr)
			return
		}
	}
}
