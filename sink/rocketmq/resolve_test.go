package rocketmq

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// fakeDNS answers lookups from a table that a test changes; a name absent from it does not
// exist.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]string
	calls int
}

func (d *fakeDNS) set(host string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts == nil {
		d.hosts = map[string][]string{}
	}
	if len(ips) == 0 {
		delete(d.hosts, host)
		return
	}
	d.hosts[host] = ips
}

func (d *fakeDNS) lookup(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if ips, ok := d.hosts[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestNsResolver(t *testing.T) {
	dns := &fakeDNS{}
	dns.set("ns-a.mq.svc", "10.0.0.2", "10.0.0.1", "10.0.0.2")
	r := newNsResolver([]string{"ns-a.mq.svc:9876", "127.0.0.1:9877", "ns-b.mq.svc:9876"}, dns.lookup)

	got, err := r.resolve(t.Context())
	if want := []string{"10.0.0.1:9876", "10.0.0.2:9876", "127.0.0.1:9877"}; !slices.Equal(got, want) {
		t.Errorf("resolve = %v, want %v (sorted, deduplicated, IPs passed through)", got, want)
	}
	if !errors.Is(err, ErrNameServerUnresolved) || !strings.Contains(err.Error(), "ns-b.mq.svc:9876") || strings.Contains(err.Error(), "ns-a") {
		t.Errorf("resolve error %v, want one naming only ns-b", err)
	}

	// Every call looks the names up again: a NameServer pod that moved is found.
	dns.set("ns-a.mq.svc", "10.0.0.7")
	dns.set("ns-b.mq.svc", "10.0.0.8")
	if got, want := r.Resolve(), []string{"10.0.0.7:9876", "10.0.0.8:9876", "127.0.0.1:9877"}; !slices.Equal(got, want) {
		t.Errorf("Resolve after a move = %v, want %v", got, want)
	}

	// DNS gone entirely: the newest good answer stays, the client's list is never emptied.
	names := newNsResolver([]string{"ns-a.mq.svc:9876"}, dns.lookup)
	if got := names.Resolve(); !slices.Equal(got, []string{"10.0.0.7:9876"}) {
		t.Fatalf("Resolve = %v", got)
	}
	dns.set("ns-a.mq.svc")
	if got := names.Resolve(); !slices.Equal(got, []string{"10.0.0.7:9876"}) {
		t.Errorf("Resolve during a DNS failure = %v, want the last good answer", got)
	}
	if got, err := names.resolve(t.Context()); len(got) != 0 || !errors.Is(err, ErrNameServerUnresolved) {
		t.Errorf("resolve during a DNS failure = %v, %v", got, err)
	}
	if !strings.Contains(names.Description(), "ns-a.mq.svc:9876") {
		t.Errorf("Description %q", names.Description())
	}
}

// A host name NameServer works end to end; one that does not resolve yet behaves like an
// unreachable NameServer (retryable sends, Check names it) until it does.
func TestNameServerHostName(t *testing.T) {
	c := startCluster(t, rocketmq.Options{})
	topic := newTopic(c, 4)
	_, port, err := net.SplitHostPort(c.NameServer())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("localhost", func(t *testing.T) {
		s, err := New(t.Name(), Config{NameServers: []string{net.JoinHostPort("localhost", port)}})
		if err != nil {
			t.Fatalf("New with a host name: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Check(t.Context(), []string{topic}); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if err := s.Send(t.Context(), keyed(topic, []string{"a"}, 2)); err != nil {
			t.Fatalf("Send: %v", err)
		}
		wait(t, c, topic, 2)
	})

	t.Run("resolves later", func(t *testing.T) {
		dns := &fakeDNS{}
		s, err := New(t.Name(), Config{NameServers: []string{"namesrv.mq.svc:" + port}, SendTimeout: 2 * time.Second, lookup: dns.lookup})
		if err != nil {
			t.Fatalf("New with a name that does not resolve yet: %v (want it to start and retry)", err)
		}
		t.Cleanup(func() { s.Close() })
		se := sendErr(t, s.Send(t.Context(), keyed(topic, []string{"b"}, 2)))
		for _, f := range se.Failures {
			if sink.IsPermanent(f.Err) || sink.IsTopicMissing(f.Err) {
				t.Fatalf("message %d: %v, want an ordinary retryable failure", f.Index, f.Err)
			}
		}
		if !errors.Is(se.Failures[0].Err, ErrNameServerUnresolved) || !strings.Contains(se.Failures[0].Err.Error(), "namesrv.mq.svc") {
			t.Errorf("failure %v does not say which name does not resolve", se.Failures[0].Err)
		}
		if err := s.Check(t.Context(), []string{topic}); err == nil || !strings.Contains(err.Error(), "namesrv.mq.svc") {
			t.Errorf("Check = %v, want it to name the unresolvable host", err)
		}
		dns.set("namesrv.mq.svc", "127.0.0.1")
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := s.Send(t.Context(), keyed(topic, []string{"b"}, 2))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Send still failing after the name resolves: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := s.Check(t.Context(), []string{topic}); err != nil {
			t.Errorf("Check after the name resolves: %v", err)
		}
	})

	t.Run("check names a partly unresolvable list", func(t *testing.T) {
		dns := &fakeDNS{}
		dns.set("good.mq.svc", "127.0.0.1")
		s, err := New(t.Name(), Config{NameServers: []string{"good.mq.svc:" + port, "typo.mq.svc:" + port}, lookup: dns.lookup})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Check(t.Context(), []string{topic}); err == nil || !strings.Contains(err.Error(), "typo.mq.svc") || strings.Contains(err.Error(), "good.mq.svc:") {
			t.Errorf("Check = %v, want it to name typo.mq.svc only", err)
		}
		if err := s.Check(t.Context(), nil); err != nil {
			t.Errorf("readiness probe = %v: the sink works with the name that resolves", err)
		}
		if err := s.Send(t.Context(), keyed(topic, []string{"c"}, 1)); err != nil {
			t.Errorf("Send with one good name: %v", err)
		}
	})
}
