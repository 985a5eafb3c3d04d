package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/kafkatap"
)

// The HA world: Options.Instances outboxd processes with one config (ha on, the mysql store),
// each with its own MariaDB proxy, admin address and Kafka client id. A watcher polls every
// instance's /status and records each new leadership term (a higher epoch) as a run, so
// duplicates are attributed to the takeover that caused them; the leader faults measure how
// long the takeover took, and the Kafka tap checks that a deposed leader's produce requests
// stop reaching the broker once the next leader leads.

// haKinds are the faults that need a standby.
var haKinds = []string{"leader_kill9", "leader_blackhole", "leader_sigstop"}

// takeover is one measured leader change: from the fault to the next leader's first /status.
type takeover struct {
	Kind    string  `json:"kind"`
	Seconds float64 `json:"seconds"`
}

// term is one leadership term as the watcher saw it.
type term struct {
	inst  *outboxd
	epoch int64
	seen  time.Time // when the watcher first saw it
	// start is when the instance took the lock (its /status ha.since; seen without one).
	start time.Time
}

// begins reports whether t, as an instance reports it, is a term after cur: a higher epoch,
// or another instance that took the lock after cur began. The epoch alone is not enough: a
// crash failover can lose the claim that moved it (the dead primary had it, the replica never
// did), and the next leader's claim then repeats an epoch already seen. A deposed instance
// that still says leader (frozen, not yet fenced) names its own older start and is no new term.
func (t term) begins(cur *term) bool {
	switch {
	case cur == nil || t.epoch > cur.epoch:
		return true
	case t.inst == cur.inst:
		return false
	default:
		return !t.start.IsZero() && t.start.After(cur.start)
	}
}

// watcher follows the leader across instances.
type watcher struct {
	runs *runLog

	mu    sync.Mutex
	cur   *term
	terms []term
	fault string // the fault being injected ("" between faults): the After of a new term
}

// watch polls inst's /status every 50 ms until ctx ends, recording terms.
func (wa *watcher) watch(ctx context.Context, inst *outboxd) {
	cl := http.Client{Timeout: 300 * time.Millisecond} // a frozen instance does not answer
	for ctx.Err() == nil {
		role, epoch, since, ok := haRole(&cl, inst.admin)
		if ok && role == "leader" {
			wa.mu.Lock()
			if t := (term{inst: inst, epoch: epoch, seen: time.Now(), start: since}); t.begins(wa.cur) {
				if t.start.IsZero() || t.start.After(t.seen) {
					t.start = t.seen
				}
				wa.cur = &t
				wa.terms = append(wa.terms, t)
				wa.runs.add(t.start, wa.fault)
			}
			wa.mu.Unlock()
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// haRole reads ha.role, ha.epoch and ha.since from the admin server at addr.
func haRole(cl *http.Client, addr string) (role string, epoch int64, since time.Time, ok bool) {
	resp, err := cl.Get("http://" + addr + "/status")
	if err != nil {
		return "", 0, time.Time{}, false
	}
	defer resp.Body.Close()
	var s struct {
		HA *struct {
			Role  string    `json:"role"`
			Epoch int64     `json:"epoch"`
			Since time.Time `json:"since"`
		} `json:"ha"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&s) != nil || s.HA == nil {
		return "", 0, time.Time{}, false
	}
	return s.HA.Role, s.HA.Epoch, s.HA.Since, true
}

func (wa *watcher) setFault(kind string) {
	wa.mu.Lock()
	wa.fault = kind
	wa.mu.Unlock()
}

func (wa *watcher) current() *term {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	if wa.cur == nil {
		return nil
	}
	t := *wa.cur
	return &t
}

// leader waits up to timeout for the latest term's instance to be running and to say, asked
// now, that it leads that term (the watcher may not have seen a newer term yet: acting on a
// stale one would wait for a standby that in fact leads).
func (w *world) leader(ctx context.Context, timeout time.Duration) *term {
	cl := http.Client{Timeout: 300 * time.Millisecond}
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if t := w.watch.current(); t != nil {
			t.inst.mu.Lock()
			up := t.inst.cmd != nil && !t.inst.stopped
			t.inst.mu.Unlock()
			if role, epoch, _, ok := haRole(&cl, t.inst.admin); up && ok && role == "leader" && epoch == t.epoch {
				return t
			}
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return nil
}

// standbyReady restarts instances that exited and waits up to timeout for one other than
// leader to report role standby.
func (w *world) standbyReady(ctx context.Context, leader *outboxd, timeout time.Duration) bool {
	cl := http.Client{Timeout: 300 * time.Millisecond}
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		_ = w.ensure()
		for _, o := range w.obds {
			if o == leader {
				continue
			}
			if role, _, _, ok := haRole(&cl, o.admin); ok && role == "standby" {
				return true
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return false
}

// waitTakeover waits up to timeout for a term after old and records how long it took from
// since. It does not stop at ctx's end (a fault must finish what it started).
func (w *world) waitTakeover(old *term, kind string, since time.Time, timeout time.Duration) (*term, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if t := w.watch.current(); t != nil && t.epoch > old.epoch {
			w.mu.Lock()
			w.takeovers = append(w.takeovers, takeover{Kind: kind, Seconds: t.start.Sub(since).Seconds()})
			w.mu.Unlock()
			return t, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.mu.Lock()
	w.takeoverTimeouts++
	w.mu.Unlock()
	w.o.Logf("%s: no new leader within %s of the fault", kind, timeout)
	return nil, false
}

// wait is W of the contract: the lock connection's server-side idle timeout,
// ceil(lease + S + 2 s), S the longest sink request timeout (the Kafka sink's 2 s here).
func (w *world) wait() time.Duration {
	return time.Duration(math.Ceil((w.o.Lease + 2*time.Second + 2*time.Second).Seconds())) * time.Second
}

// injectHA applies one HA fault kind (or the HA meaning of outboxd_kill9 and outboxd_sigterm)
// and reports whether it knew the kind.
func (w *world) injectHA(ctx context.Context, rng *rand.Rand, kind string, scaled func(lo, hi time.Duration) time.Duration) (bool, error) {
	switch kind {
	case "outboxd_kill9":
		// The whole deployment crashes: every instance, then all restart.
		for _, o := range w.obds {
			o.stop(syscall.SIGKILL)
		}
		w.watch.setFault("kill9")
		sleepCtx(ctx, scaled(10*time.Millisecond, 1500*time.Millisecond))
		for _, o := range w.obds {
			if err := o.start("kill9"); err != nil {
				return true, err
			}
		}
		return true, nil
	case "outboxd_sigterm", "leader_kill9", "leader_blackhole", "leader_sigstop":
	default:
		return false, nil
	}
	// A takeover needs a standby ready to take it: one that exited superseded a moment ago
	// (after the previous fault) is restarted and waited for.
	old := w.leader(ctx, 20*time.Second)
	if old != nil && !w.standbyReady(ctx, old.inst, 30*time.Second) {
		old = nil
	}
	if old == nil {
		if ctx.Err() == nil {
			w.mu.Lock()
			w.leaderless++
			w.mu.Unlock()
			w.o.Logf("%s: no leader with a ready standby to act on", kind)
		}
		return true, nil
	}
	bound := w.wait() + time.Second + 10*time.Second // W + 1 s + start, with room for a loaded machine
	began := time.Now()
	switch kind {
	case "outboxd_sigterm":
		// A rolling update: the leader stops gracefully, the standby takes over, the stopped
		// one comes back as a standby.
		if !old.inst.stop(syscall.SIGTERM) {
			w.o.Logf("outboxd %s did not stop within 30s of SIGTERM; killed", old.inst.name)
		}
		w.waitTakeover(old, kind, began, bound)
		return true, old.inst.start("sigterm")
	case "leader_kill9":
		old.inst.stop(syscall.SIGKILL)
		w.waitTakeover(old, kind, began, bound)
		sleepCtx(ctx, scaled(10*time.Millisecond, 1500*time.Millisecond))
		return true, old.inst.start("kill9")
	case "leader_blackhole":
		for _, p := range old.inst.mysqlProxies() {
			p.SetMode(faultproxy.Blackhole)
		}
		w.waitTakeover(old, kind, began, bound)
		sleepCtx(ctx, scaled(0, time.Second))
		for _, p := range old.inst.mysqlProxies() {
			p.SetMode(faultproxy.Pass) // it then exits superseded or stays a standby
		}
	case "leader_sigstop":
		old.inst.freeze(true)
		defer old.inst.freeze(false)
		w.waitTakeover(old, kind, began, bound+w.o.Lease)
		// Beyond the lease and W for sure, then wake it: it must find itself superseded.
		if d := w.o.Lease + w.wait() - time.Since(began); d > 0 {
			time.Sleep(d)
		}
		sleepCtx(ctx, scaled(0, time.Second))
	}
	return true, nil
}

// staleProduces counts produce requests of a deposed leader's instance forwarded to the broker
// after the next leader (another instance) was seen leading.
func staleProduces(terms []term, produces func(clientID string, since time.Time) []kafkatap.Request) int {
	n, _ := staleProducesBy(terms, produces)
	return n
}

// staleProducesBy is staleProduces with one line per takeover that had any: the deposed
// instance, how many, and when the first and last were forwarded after the next term began.
func staleProducesBy(terms []term, produces func(clientID string, since time.Time) []kafkatap.Request) (int, []string) {
	n := 0
	var lines []string
	for i := 1; i < len(terms); i++ {
		prev, next := terms[i-1], terms[i]
		if prev.inst == next.inst {
			continue // the same instance again (after a restart of all, or a fence and re-election)
		}
		last := i+1 == len(terms)
		var k int
		var firstAt, lastAt time.Duration
		for _, r := range produces(prev.inst.clientID, next.start) {
			if last || r.Forwarded.Before(terms[i+1].start) {
				if k == 0 {
					firstAt = r.Forwarded.Sub(next.start)
				}
				lastAt = r.Forwarded.Sub(next.start)
				k++
			}
		}
		if k > 0 {
			n += k
			lines = append(lines, fmt.Sprintf("%d produce(s) of deposed %s after %s's term began at %s: first +%v, last +%v",
				k, prev.inst.name, next.inst.name, next.start.Format("15:04:05.000"), firstAt.Round(time.Millisecond), lastAt.Round(time.Millisecond)))
		}
	}
	return n, lines
}

// percentile is the p-th percentile (0..1) of xs by nearest rank; 0 for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// haReport fills the HA figures of rep.
func (w *world) haReport(rep *Report) {
	w.mu.Lock()
	rep.Takeovers = append([]takeover(nil), w.takeovers...)
	rep.TakeoverTimeouts, rep.Leaderless = w.takeoverTimeouts, w.leaderless
	w.mu.Unlock()
	secs := make([]float64, len(rep.Takeovers))
	for i, t := range rep.Takeovers {
		secs[i] = t.Seconds
	}
	rep.TakeoverP50S, rep.TakeoverMaxS = percentile(secs, 0.5), percentile(secs, 1)
	w.watch.mu.Lock()
	terms := append([]term(nil), w.watch.terms...)
	w.watch.mu.Unlock()
	rep.Terms = len(terms)
	var lines []string
	rep.StaleProduces, lines = staleProducesBy(terms, w.kafka.tap.Produces)
	for _, l := range lines {
		rep.example("%s", l)
	}
}
