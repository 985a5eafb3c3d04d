package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// lookupTimeout bounds one DNS lookup of a NameServer host name.
const lookupTimeout = 2 * time.Second

// ErrNameServerUnresolved marks a NameServer host name that DNS could not resolve. It is
// transient for the pipeline: a name that does not resolve yet (a Kubernetes headless service
// before its first pod is ready, a DNS server that is restarting) behaves like a NameServer
// that is unreachable. Test with errors.Is.
var ErrNameServerUnresolved = errors.New("NameServer host name does not resolve")

// lookupFunc resolves a host name to IP addresses (net.Resolver.LookupHost).
type lookupFunc func(ctx context.Context, host string) ([]string, error)

// nsResolver is the client's primitive.NsResolver for the configured NameServers. The RocketMQ
// Go client accepts only IP addresses (it checks them against an IP pattern), so host names,
// such as Kubernetes service names, are resolved here, with a DNS lookup on every call: the
// client calls Resolve when it creates its NameServer list (the sink's start, answered from
// the start's own lookup, see pin) and then, in
// UpdateNameServerAddress, 10 s after start and every 2 minutes, so a NameServer that moved to
// another address is found again without a restart. Literal IP addresses pass through.
// Safe for concurrent use.
type nsResolver struct {
	addrs  []string // as configured, host:port
	lookup lookupFunc

	mu   sync.Mutex
	last []string // the newest non-empty result
	// pinned, while set (see pin), is what Resolve answers without looking anything up.
	pinned []string
}

var _ primitive.NsResolver = (*nsResolver)(nil)

func newNsResolver(addrs []string, lookup lookupFunc) *nsResolver {
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	return &nsResolver{addrs: slices.Clone(addrs), lookup: lookup}
}

// resolve looks up every configured address and returns the "ip:port" of each IP found,
// sorted and without duplicates, and an error (wrapping ErrNameServerUnresolved) naming
// every host that did not resolve. Names that resolve are returned even when others fail. It
// blocks for at most lookupTimeout per name, or until ctx ends.
func (r *nsResolver) resolve(ctx context.Context) ([]string, error) {
	var out []string
	var errs []error
	for _, a := range r.addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("NameServer %q: want host:port: %w", a, err))
			continue
		}
		if net.ParseIP(host) != nil {
			out = append(out, a)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		ips, err := r.lookup(lctx, host)
		cancel()
		if err == nil && len(ips) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("NameServer %s: %w: %w", a, ErrNameServerUnresolved, err))
			continue
		}
		for _, ip := range ips {
			if net.ParseIP(ip) != nil {
				out = append(out, net.JoinHostPort(ip, port))
			}
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 0 {
		r.mu.Lock()
		r.last = out
		r.mu.Unlock()
	}
	return out, errors.Join(errs...)
}

// Resolve is called by the client (see the type's comment). When no name resolves now, it
// returns the newest earlier result, so a DNS hiccup never empties the client's list (the
// client ignores an empty answer after start anyway, and fails to start without one).
func (r *nsResolver) Resolve() []string {
	r.mu.Lock()
	pinned := slices.Clone(r.pinned)
	r.mu.Unlock()
	if pinned != nil {
		return pinned
	}
	out, _ := r.resolve(context.Background())
	if len(out) > 0 {
		return out
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.last)
}

// pin runs f with Resolve answering addrs, a result resolve just returned: the sink's start
// resolves the names once and creates the producer and the route client, each of which calls
// Resolve at once, from that answer instead of repeating every lookup twice.
func (r *nsResolver) pin(addrs []string, f func() (*clients, error)) (*clients, error) {
	r.mu.Lock()
	r.pinned = addrs
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.pinned = nil
		r.mu.Unlock()
	}()
	return f()
}

// Description is for the client's logs.
func (r *nsResolver) Description() string {
	return "outboxd DNS resolver of " + strings.Join(r.addrs, ",")
}
