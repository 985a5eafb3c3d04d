package rocketmq

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// reply is what a handler decided to do with a request.
type reply struct {
	resp    *command      // nil with neither drop nor noReply set: nothing to send (oneway)
	delay   time.Duration // write resp after this long
	drop    bool          // close the connection instead of answering
	noReply bool          // never answer; the connection stays open
	// wait, when set, computes the answer later, in a goroutine of its own (a suspended pull):
	// it returns the response, or nil to send none; done is closed when the connection ends.
	wait func(done <-chan struct{}) *command
}

// server is one TCP listener speaking the remoting protocol. Requests of one
// connection are handled one at a time in arrival order, so store order equals
// send order on a connection; only a delayed answer is written later.
type server struct {
	name   string
	logf   func(format string, args ...any)
	handle func(req *command) reply
	// closed, if set, is called once a connection has ended.
	closed func(sc *serverConn)

	mu    sync.Mutex
	ln    net.Listener
	conns map[*serverConn]struct{}
	wg    sync.WaitGroup
}

type serverConn struct {
	net.Conn
	wmu       sync.Mutex
	done      chan struct{}
	closeOnce sync.Once
}

func (sc *serverConn) close() {
	sc.closeOnce.Do(func() {
		close(sc.done)
		_ = sc.Conn.Close()
	})
}

func (sc *serverConn) write(frame []byte) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	if err := sc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	_, err := sc.Write(frame)
	return err
}

// listen starts accepting on addr ("127.0.0.1:0" for a free port). It returns
// once the listener is bound; connections are served in the background.
func (s *server) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", s.name, addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
	}
	s.mu.Unlock()
	s.wg.Go(func() { s.acceptLoop(ln) })
	return nil
}

func (s *server) addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// stop closes the listener and every connection and waits until all of the
// server's goroutines (including delayed answers) have returned.
func (s *server) stop() {
	s.mu.Lock()
	ln := s.ln
	s.ln = nil
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	s.wg.Wait()
}

func (s *server) acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.logf("%s: accept: %v", s.name, err)
			}
			return
		}
		sc := &serverConn{Conn: c, done: make(chan struct{})}
		s.mu.Lock()
		if s.ln != ln { // stopped between Accept and here
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[sc] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(sc) })
	}
}

func (s *server) serve(sc *serverConn) {
	defer func() {
		sc.close()
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
		if s.closed != nil {
			s.closed(sc)
		}
	}()
	for {
		req, err := readFrame(sc)
		if err != nil {
			select {
			case <-sc.done:
			default:
				if !isEOF(err) {
					s.logf("%s: %s: read: %v", s.name, sc.RemoteAddr(), err)
				}
			}
			return
		}
		if req.isResponse() {
			// Answers to broker-initiated requests; this broker sends none.
			continue
		}
		req.conn = sc
		r := s.handle(req)
		if r.wait != nil {
			s.wg.Go(func() {
				resp := r.wait(sc.done)
				if resp == nil {
					return
				}
				resp.Opaque, resp.Flag, resp.serialize = req.Opaque, resp.Flag|flagResponse, req.serialize
				frame, err := encodeFrame(resp)
				if err == nil {
					err = sc.write(frame)
				}
				if err != nil && !isEOF(err) {
					s.logf("%s: write suspended response: %v", s.name, err)
				}
			})
			continue
		}
		switch {
		case r.drop:
			s.logf("%s: fault: dropping connection %s on request code %d", s.name, sc.RemoteAddr(), req.Code)
			return
		case r.noReply || r.resp == nil || req.isOneway():
			continue
		}
		r.resp.Opaque = req.Opaque
		r.resp.Flag |= flagResponse
		r.resp.serialize = req.serialize
		frame, err := encodeFrame(r.resp)
		if err != nil {
			s.logf("%s: encode response to code %d: %v", s.name, req.Code, err)
			return
		}
		if r.delay > 0 {
			s.wg.Go(func() {
				t := time.NewTimer(r.delay)
				defer t.Stop()
				select {
				case <-t.C:
					if err := sc.write(frame); err != nil {
						s.logf("%s: write delayed response: %v", s.name, err)
					}
				case <-sc.done:
				}
			})
			continue
		}
		if err := sc.write(frame); err != nil {
			s.logf("%s: write response: %v", s.name, err)
			return
		}
	}
}

// notify sends a broker-initiated oneway request (NOTIFY_CONSUMER_IDS_CHANGED) on sc.
func (sc *serverConn) notify(cmd *command) error {
	cmd.Flag |= flagOneway
	frame, err := encodeFrame(cmd)
	if err != nil {
		return err
	}
	return sc.write(frame)
}

// isEOF reports a peer simply going away, which is not worth logging.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET)
}
