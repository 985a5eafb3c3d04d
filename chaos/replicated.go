package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand"
	"os"
	"time"

	"github.com/outboxd/outboxd/testenv/faultproxy"
	"github.com/outboxd/outboxd/testenv/mariadb"
	"github.com/outboxd/outboxd/testenv/replication"
)

// The replicated world (Options.Replicated): MariaDB is a testenv/replication pair (GTID
// replication, log_slave_updates). Each outboxd has source.addrs [server 1, server 2], each
// through a proxy of its own (srcPx), and on_missing_gtids: continue. Its myPx is then the
// writer path (checkpoint.writer_addr: the lock and the checkpoint row), a proxy that follows
// the primary like a virtual IP: a switchover moves it. The generator writes to the primary.

// crashFailoverEvery: primary_crash_failover is in the first round and then in one round of
// this many, since its rebuild of the old primary copies the whole history (a few seconds per
// 100,000 rows), where every other fault takes a second or two.
const crashFailoverEvery = 8

// replKinds are the faults of the replicated world.
var replKinds = []string{"primary_failover", "primary_crash_failover", "replica_kill9"}

// missingLogLine is the log line of outboxd for delivered transactions no candidate has any
// more (on_missing_gtids: continue).
const missingLogLine = "on_missing_gtids: continue: these transactions were delivered"

// lostBehindLine is the log line of a process that led before a crash failover and finds
// transactions it delivered and checkpointed gone from the database (daemon's lostBehind).
const lostBehindLine = "these transactions were delivered and checkpointed by this process, and the database no longer has them"

// setupPair starts the pair and points w.srv and w.db at its primary.
func (w *world) setupPair(ctx context.Context) error {
	var err error
	if w.pair, err = replication.Start(ctx, replication.Options{}); err != nil {
		return fmt.Errorf("start a replicated MariaDB pair (apt-get install mariadb-server): %w", err)
	}
	w.servers = [2]*mariadb.Server{w.pair.Primary(), w.pair.Replica()}
	for i, s := range w.servers {
		if w.dbs[i], err = s.DB(ctx, ""); err != nil {
			return err
		}
		w.dbs[i].SetMaxOpenConns(8)
	}
	w.srv, w.db = w.servers[0], w.dbs[0]
	return nil
}

// primaryIdx is the index in w.servers of the primary now.
func (w *world) primaryIdx() int {
	if w.servers[1] == w.srv {
		return 1
	}
	return 0
}

// sourceProxies gives ob one proxy per server of the pair, in w.servers order.
func (w *world) sourceProxies(ob *outboxd) error {
	for _, s := range w.servers {
		p, err := faultproxy.New(s.Addr)
		if err != nil {
			return err
		}
		ob.srcPx = append(ob.srcPx, p)
	}
	return nil
}

// sourceYAML is the source address part of an instance's config.
func (w *world) sourceYAML(ob *outboxd) string {
	if w.pair == nil {
		return "  addr: " + ob.myPx.Addr() + "\n"
	}
	return fmt.Sprintf("  addrs: [%q, %q]\n  on_missing_gtids: continue\n", ob.srcPx[0].Addr(), ob.srcPx[1].Addr())
}

// writerYAML is the checkpoint.writer_addr setting of the mysql store ("" without a pair: the
// store writes at source.addr).
func (w *world) writerYAML(ob *outboxd) string {
	if w.pair == nil {
		return ""
	}
	return fmt.Sprintf(", writer_addr: %q", ob.myPx.Addr())
}

// primaryPaths is what a mysql_proxy_* fault acts on: each instance's path to the primary (its
// writer proxy and, with a pair, its source proxy of the primary).
func (w *world) primaryPaths() []*faultproxy.Proxy {
	var ps []*faultproxy.Proxy
	for _, ob := range w.obds {
		ps = append(ps, ob.myPx)
		if w.pair != nil {
			ps = append(ps, ob.srcPx[w.primaryIdx()])
		}
	}
	return ps
}

// restartPrimary restarts the primary (gracefully, or after a Kill) with its own flags.
func (w *world) restartPrimary(ctx context.Context) error {
	if w.pair == nil {
		return w.srv.Restart(ctx, mariadb.Options{})
	}
	return w.pair.Restart(ctx, w.srv)
}

// switchover is a planned switchover: the generator's writes stop, the writer proxies and the
// source proxies of the old primary stop taking connections and drop theirs (the virtual IP is
// moving; the demotion kills client connections, as MHA and Orchestrator do), the replica is
// promoted and the old primary follows it, the writer proxies point at the new primary, and
// writes resume there. A stream lost here resumes on the new primary (the old one refuses);
// once the old primary takes connections again, outboxd may return to it on a later loss (it
// is the first candidate, a replica with log_slave_updates).
func (w *world) switchover(ctx context.Context, gen *generator) error {
	gen.gate.Lock()
	old := w.primaryIdx()
	for _, ob := range w.obds {
		for _, p := range []*faultproxy.Proxy{ob.myPx, ob.srcPx[old]} {
			p.SetMode(faultproxy.DropNew)
			p.ResetAll()
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	err := w.pair.Promote(pctx)
	w.followPrimary(gen)
	gen.gate.Unlock() // writes resume on the new primary
	if err == nil {
		// The old primary takes connections again a while later, so the stream the demotion
		// cut resumes on the new primary.
		sleepCtx(ctx, w.refuseOld())
	}
	for _, ob := range w.obds {
		ob.srcPx[old].SetMode(faultproxy.Pass)
	}
	if err != nil {
		return fmt.Errorf("switchover: %w\n%s", err, w.pair.LogTail(2000))
	}
	if w.switchovers == 0 && w.crashFailovers == 0 {
		w.leftServer1 = true
	}
	w.switchovers++
	return nil
}

// crashFailover is the failover after the primary died, while rows flow: the replica's IO thread
// stops for lag (an asynchronous replica behind its primary), then kill -9 of the primary,
// the replica promoted at once (PromoteAfterCrash: what it had not received is lost), the writer
// proxies pointed at it and writes resumed there, as an orchestrator does. outboxd's source
// proxies of the dead server refuse while it is away. Then the harness reads what only the dead
// primary had (it restarts the server alone, unreachable to outboxd, and compares the outbox
// tables): those rows are the failover's loss, which the verdict sets apart (w.discarded) from
// outboxd's. The old server, whose history may have diverged, is rebuilt as a fresh replica of
// the new primary (replication.Rebuild: same address, new server id, the whole history copied)
// and listed again once it caught up.
func (w *world) crashFailover(ctx context.Context, gen *generator, lag time.Duration) error {
	// The replica falls behind first, so the crash loses committed rows.
	if err := w.pair.PauseReplication(ctx); err != nil {
		return fmt.Errorf("crash failover: %w", err)
	}
	sleepCtx(ctx, lag)
	old := w.primaryIdx()
	for _, ob := range w.obds {
		ob.srcPx[old].SetMode(faultproxy.DropNew)
	}
	crashed := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	err := w.pair.PromoteAfterCrash(pctx)
	gen.gate.Lock()
	w.followPrimary(gen)
	gen.gate.Unlock() // writes resume on the new primary
	if err != nil {
		return fmt.Errorf("crash failover: %w\n%s", err, w.pair.LogTail(2000))
	}
	w.crashFailovers++
	dead := w.servers[old]
	if err := w.pair.Restart(pctx, dead); err != nil {
		return fmt.Errorf("crash failover: restart the dead primary to read what only it had: %w", err)
	}
	onlyOld, err := onlyOn(pctx, w.dbs[old], w.db)
	if err != nil {
		return fmt.Errorf("crash failover: %w", err)
	}
	for id := range onlyOld {
		w.discarded[id] = true
	}
	if err := w.pair.Rebuild(pctx); err != nil {
		return fmt.Errorf("crash failover: %w\n%s", err, w.pair.LogTail(2000))
	}
	// The copy replays the whole history: allow for a long one.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer wcancel()
	if err := w.pair.WaitCaughtUp(wctx); err != nil {
		return fmt.Errorf("crash failover: the rebuilt replica: %w\n%s", err, w.pair.LogTail(2000))
	}
	// A dead server stays away a while: the stream the crash cut resumes on the new primary.
	sleepCtx(ctx, w.refuseOld()-time.Since(crashed))
	for _, ob := range w.obds {
		ob.srcPx[old].SetMode(faultproxy.Pass)
	}
	return nil
}

// onlyOn returns the event ids in a's outbox table that b's lacks.
func onlyOn(ctx context.Context, a, b *sql.DB) (map[string]bool, error) {
	ids, err := everCommitted(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("the dead primary: %w", err)
	}
	have, err := everCommitted(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("the new primary: %w", err)
	}
	for id := range have {
		delete(ids, id)
	}
	return ids, nil
}

// followPrimary points the harness, the generator (whose gate the caller holds) and every
// writer proxy (the VIP) at the pair's primary now; the writer proxies drop what they had open
// and take connections again.
func (w *world) followPrimary(gen *generator) {
	if p := w.pair.Primary(); p != w.srv {
		w.srv = p
		w.db = w.dbs[w.primaryIdx()]
		gen.db = w.db
	}
	for _, ob := range w.obds {
		ob.myPx.SetTarget(w.srv.Addr)
		ob.myPx.ResetAll()
		ob.myPx.SetMode(faultproxy.Pass)
	}
}

// refuseOld is how long the old primary refuses connections after a switchover: longer than
// the lock wait of a new leader (one ping interval, the lease) so the relay's next stream
// starts on the new primary.
func (w *world) refuseOld() time.Duration { return 2*w.o.Lease + 2*time.Second }

// killReplica kills the replica with SIGKILL and, after a pause, restarts it as a replica of the
// primary from its own binlog position.
func (w *world) killReplica(ctx context.Context, pause time.Duration) error {
	if err := w.pair.Replica().Kill(); err != nil {
		return err
	}
	sleepCtx(ctx, pause)
	rctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := w.pair.Rejoin(rctx); err != nil {
		return fmt.Errorf("rejoin the killed replica: %w\n%s", err, w.pair.LogTail(2000))
	}
	return nil
}

// injectRepl applies a fault of the replicated world; ok is false for other kinds.
func (w *world) injectRepl(ctx context.Context, rng *rand.Rand, kind string, scaled func(lo, hi time.Duration) time.Duration) (bool, error) {
	if w.pair == nil {
		return false, nil
	}
	switch kind {
	case "primary_failover":
		return true, w.switchover(ctx, w.gen)
	case "primary_crash_failover":
		return true, w.crashFailover(ctx, w.gen, scaled(200*time.Millisecond, 2*time.Second))
	case "replica_kill9":
		return true, w.killReplica(ctx, scaled(100*time.Millisecond, 2*time.Second))
	}
	return false, nil
}

// healPair restarts a replica that is down; the primary is healed by heal.
func (w *world) healPair(ctx context.Context) error {
	if w.pair == nil || w.pair.Replica().Running() {
		return nil
	}
	return w.pair.Rejoin(ctx)
}

// replicaReport fills the pair's figures of rep.
func (w *world) replicaReport(ctx context.Context, rep *Report) {
	rep.Replicated, rep.Switchovers, rep.CrashFailovers, rep.TruthServer = true, w.switchovers, w.crashFailovers, w.srv.Addr
	rep.LeftServer1 = w.leftServer1
	rep.MissingReports = w.missingReports()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := w.pair.WaitCaughtUp(wctx); err != nil {
		rep.ReplicaError = err.Error()
	}
	rep.SourceConns = make([]int, len(w.servers))
	for _, ob := range w.obds {
		for i, p := range ob.srcPx {
			rep.SourceConns[i] += p.Accepted()
		}
	}
}

// missingReports counts outboxd's log lines of delivered transactions the database no longer
// has. Planned switchovers and replica crashes must not produce any.
func (w *world) missingReports() int {
	n := 0
	for _, ob := range w.obds {
		b, err := os.ReadFile(ob.logPath)
		if err == nil {
			n += bytes.Count(b, []byte(missingLogLine)) + bytes.Count(b, []byte(lostBehindLine))
		}
	}
	return n
}

// closeDBs closes the pools of a pair.
func (w *world) closeDBs() {
	for _, db := range w.dbs {
		if db != nil && db != w.db {
			db.Close()
		}
	}
}
