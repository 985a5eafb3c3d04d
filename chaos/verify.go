package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outboxd/outboxd/testenv/rocketmq"
)

// delivery is one message as a consumer saw it.
type delivery struct {
	Sink      string // "kafka" or "rocketmq"
	Part      int    // partition or queue
	Offset    int64
	ID        string
	Key       string
	Seq       int
	Arrived   time.Time
	BadFormat bool
}

func deliveryOf(sink string, part int, off int64, id string, body []byte, at time.Time) delivery {
	d := delivery{Sink: sink, Part: part, Offset: off, ID: id, Arrived: at}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil || p.Key == "" {
		d.BadFormat = true
	}
	d.Key, d.Seq = p.Key, p.Seq
	return d
}

// deliveries is every delivery in (sink, partition, offset) order, deduplicated by position
// (a consumer that re-reads after a broker restart must not look like a resend).
type deliveries struct {
	all   []delivery
	first map[string]int // event id -> index in all of its first delivery
}

func collect(c *kafkaConsumer, rmq *rocketmq.Cluster) deliveries {
	all := c.snapshot()
	for _, m := range rmq.Messages(rmqTopic) {
		all = append(all, deliveryOf("rocketmq", m.Queue, m.Offset, m.Keys, m.Body, m.StoredAt))
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Sink != b.Sink {
			return a.Sink < b.Sink
		}
		if a.Part != b.Part {
			return a.Part < b.Part
		}
		return a.Offset < b.Offset
	})
	out := deliveries{first: map[string]int{}}
	for i, d := range all {
		if i > 0 && all[i-1].Sink == d.Sink && all[i-1].Part == d.Part && all[i-1].Offset == d.Offset {
			continue
		}
		out.all = append(out.all, d)
		if _, ok := out.first[d.ID]; !ok {
			out.first[d.ID] = len(out.all) - 1
		}
	}
	return out
}

// Report is the outcome of a run.
type Report struct {
	Seed int64 `json:"seed"`
	// Delivery is outboxd's delivery mode. With exactly_once the Kafka consumer reads
	// read_committed and Duplicates must be 0; a deposed leader's produces are the broker's
	// to refuse (StaleProduces is reported, not judged).
	Delivery  string  `json:"delivery"`
	DurationS float64 `json:"fault_phase_seconds"`
	CatchUpS  float64 `json:"catch_up_seconds"`
	Rate      float64 `json:"rate_rows_per_second"`

	Transactions           map[string]int `json:"transactions_by_outcome"`
	RowsCommitted          int            `json:"rows_committed"`
	RowsRolledBack         int            `json:"rows_rolled_back"`
	RowsUncertainCommitted int            `json:"rows_uncertain_outcome_committed"`
	Faults                 map[string]int `json:"faults"`
	FaultsTotal            int            `json:"faults_total"`

	Delivered           int `json:"deliveries"`
	Lost                int `json:"lost"`
	OrderViolations     int `json:"order_violations"`
	RolledBackDelivered int `json:"rolled_back_delivered"`
	Phantoms            int `json:"phantom_deliveries"` // delivered but not in the table
	BadMessages         int `json:"bad_messages"`
	Duplicates          int `json:"duplicates"`
	// DuplicatesPerCrash is the duplicates that arrived during each outboxd run that followed a
	// kill -9 (in the HA world: each leadership term that followed a kill -9 or a leader fault),
	// in order; MaxDuplicateBurst is the largest of them.
	DuplicatesPerCrash []int `json:"duplicates_per_crash"`
	MaxDuplicateBurst  int   `json:"max_duplicate_burst_per_crash"`
	// DuplicatesOtherRuns are duplicates that arrived in runs not started after a kill -9
	// (broker retries after a lost answer, graceful restarts).
	DuplicatesOtherRuns int `json:"duplicates_other_runs"`

	// Harness-side checks: MariaDB must keep what it acknowledged and drop what was rolled back.
	DBLostCommits   int `json:"db_lost_acknowledged_commits"`
	DBHasRolledBack int `json:"db_has_rolled_back_rows"`

	// The replicated world: planned switchovers done, which server's table was the truth, and
	// outboxd's reports of delivered transactions the database no longer has (must be 0: no
	// fault here discards a committed transaction).
	Replicated  bool `json:"replicated"`
	Switchovers int  `json:"switchovers"`
	// CrashFailovers are primary_crash_failover faults. RowsDiscarded are committed rows
	// (COMMIT acknowledged) that only the dead primary had: the asynchronous failover's loss,
	// not outboxd's; DiscardedDelivered of them reached a consumer before the crash.
	// MissingReports may then be above 0: outboxd reports delivered transactions the new
	// primary lacks.
	CrashFailovers     int    `json:"crash_failovers"`
	RowsDiscarded      int    `json:"rows_discarded_by_crash_failovers"`
	DiscardedDelivered int    `json:"discarded_rows_delivered"`
	TruthServer        string `json:"truth_server,omitempty"`
	MissingReports     int    `json:"missing_gtid_reports"`
	// ReplicaError is why the replica did not catch up with the primary at the end ("": it
	// did). Something that wrote to a replica (a checkpoint saved on a demoted primary) breaks
	// replication under gtid_strict_mode.
	ReplicaError string `json:"replica_error,omitempty"`
	// SourceConns is the connections through each server's source proxies, in start order.
	SourceConns []int `json:"source_connections_per_server,omitempty"`
	// LeftServer1: the first switchover came before any crash failover, so it demoted server 1
	// (the first primary, outboxd's first candidate), which refused outboxd a while: outboxd
	// must have streamed from server 2. After a crash failover first, server 1 comes back as a
	// replica with every transaction and outboxd may stay on it throughout.
	LeftServer1 bool `json:"left_server_1,omitempty"`

	MySQLProxyConns int `json:"mysql_proxy_connections"`
	KafkaProxyConns int `json:"kafka_proxy_connections"`

	// Instances is how many outboxd ran (2 or more: ha on, the mysql store).
	Instances int `json:"outboxd_instances"`
	// OutboxdRuns is how many runs of a sender there were: starts of the only outboxd, or
	// leadership terms in the HA world.
	OutboxdRuns               int    `json:"outboxd_runs"`
	OutboxdUnexpectedExits    int    `json:"outboxd_unexpected_exits"`
	OutboxdLastUnexpectedExit string `json:"outboxd_last_unexpected_exit,omitempty"`
	// OutboxdSupersededExits are exits that said "superseded": expected of a leader that was
	// paused or cut off and found a takeover when it woke. The supervisor restarts it.
	OutboxdSupersededExits int      `json:"outboxd_superseded_exits"`
	OutboxdLogs            []string `json:"outboxd_logs"`

	// HA: each measured takeover after a leader fault (from the fault to the new leader taking
	// the lock), their p50 and max, those that did not happen within W + 1 s + 10 s, faults
	// skipped for want of a leader, and produce requests of a deposed leader that reached the
	// broker after the next leader (another instance) took the lock (must be 0).
	Takeovers        []takeover `json:"takeovers,omitempty"`
	TakeoverP50S     float64    `json:"takeover_p50_seconds"`
	TakeoverMaxS     float64    `json:"takeover_max_seconds"`
	TakeoverTimeouts int        `json:"takeover_timeouts"`
	Leaderless       int        `json:"leader_faults_without_leader_or_standby"`
	StaleProduces    int        `json:"stale_leader_produces"`
	Terms            int        `json:"leadership_terms"`
	// The outbox life cycle (lifecycle.go): rows cleanup deleted, those of them no consumer got
	// (must be 0: the table was their last copy), delivered rows still in the table after the
	// final wait for cleanup, and rows in the table delivered to nobody.
	CleanupDeleted     int `json:"cleanup_deleted"`
	DeletedUndelivered int `json:"cleanup_deleted_undelivered"`
	LeftDelivered      int `json:"cleanup_left_delivered"`
	LeftUndelivered    int `json:"left_undelivered"`
	// Dark rows were committed with sql_log_bin=0: never delivered (a delivery is a phantom),
	// never deleted (DarkDeleted must be 0), reported missing by reconcile.
	DarkRows    int `json:"dark_rows_committed"`
	DarkInTable int `json:"dark_rows_in_table"`
	DarkDeleted int `json:"dark_rows_deleted"`
	// The final `outboxd reconcile` over the whole run: how many it reported missing, and the
	// event ids on which it and the verifier disagree (must be 0).
	ReconcileMissing   int      `json:"reconcile_missing"`
	ReconcileMismatch  int      `json:"reconcile_mismatch"`
	ReconcileError     string   `json:"reconcile_error,omitempty"`
	PeriodicReconciles int      `json:"periodic_reconcile_runs"`
	Examples           []string `json:"examples,omitempty"`
	KeptDir            string   `json:"kept_dir,omitempty"`

	// The read-back at the end (reread.go), which tells a loss apart: a fresh client reads
	// the whole Kafka topic from offset 0. LostInBroker are lost rows the topic does not hold
	// (the broker or the producer lost them); LostMissedByConsumer are lost rows it holds (the
	// live consumer skipped them). OffsetsRewritten counts offsets at which the live consumer
	// got another record than the read-back finds (the broker reused offsets);
	// ConsumerOffsetGaps counts jumps in the live consumer's offsets.
	LostInBroker         int      `json:"lost_absent_from_topic"`
	LostMissedByConsumer int      `json:"lost_present_in_topic"`
	OffsetsRewritten     int      `json:"offsets_rewritten"`
	ConsumerOffsetGaps   int      `json:"consumer_offset_gaps"`
	RereadError          string   `json:"reread_error,omitempty"`
	RereadNotes          []string `json:"reread_notes,omitempty"`
}

// exactlyOnce reports whether the run was in exactly-once mode.
func (r *Report) exactlyOnce() bool { return r.Delivery == DeliveryExactlyOnce }

// OK reports whether nothing was lost, reordered, or wrongly delivered, and, exactly once,
// nothing delivered twice.
func (r *Report) OK() bool {
	if r.exactlyOnce() && r.Duplicates != 0 {
		return false
	}
	return r.Lost == 0 && r.OrderViolations == 0 && r.RolledBackDelivered == 0 && r.Phantoms == 0 &&
		r.BadMessages == 0 && r.DBLostCommits == 0 && r.DBHasRolledBack == 0 && (r.StaleProduces == 0 || r.exactlyOnce()) &&
		(r.MissingReports == 0 || r.CrashFailovers > 0) && r.ReplicaError == "" &&
		r.DeletedUndelivered == 0 && r.DarkDeleted == 0 && r.ReconcileMismatch == 0 && r.ReconcileError == ""
}

func (r *Report) example(format string, args ...any) {
	if len(r.Examples) < 20 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// crashLike are the run starts after which resends of the unacknowledged window are expected:
// a kill -9, or a takeover after a leader fault.
var crashLike = map[string]bool{"kill9": true, "leader_kill9": true, "leader_blackhole": true, "leader_sigstop": true}

// verify compares what the generator committed, what the table holds (truth) and what the
// consumers got. discarded are rows a crash failover lost with the dead primary: committed and
// acknowledged there, never replicated. They are not outboxd's to deliver (they are in no
// surviving binlog), so they count apart: a committed row missing from truth is the database's
// loss only when it is not among them, and a delivery of one is not a phantom.
func verify(g *generator, truth, discarded map[string]bool, got deliveries, epochs []epoch) *Report {
	r := &Report{Faults: map[string]int{}}
	g.mu.Lock()
	r.Transactions = map[string]int{}
	for k, v := range g.txns {
		r.Transactions[k] = v
	}
	for id, row := range g.rows {
		if strings.HasPrefix(id, darkPrefix) {
			continue // never in the binlog: lifecycleVerdict judges them
		}
		switch row.State {
		case stCommitted:
			if discarded[id] {
				r.RowsDiscarded++
			} else if !truth[id] {
				r.DBLostCommits++
				r.example("MariaDB lost acknowledged row %s", id)
			}
		case stRolledBack:
			r.RowsRolledBack++
			if truth[id] {
				r.DBHasRolledBack++
			}
		case stUnknown:
			if truth[id] {
				r.RowsUncertainCommitted++
			}
		}
	}
	states := make(map[string]string, len(g.rows))
	for id, row := range g.rows {
		states[id] = row.State
	}
	g.mu.Unlock()
	r.RowsCommitted = len(truth)
	r.Delivered = len(got.all)

	for id := range truth {
		if _, ok := got.first[id]; !ok {
			r.Lost++
			r.example("lost: %s", id)
		}
	}
	type keyState struct {
		sink string
		part int
		seq  int
	}
	last := map[string]*keyState{}
	crashIdx := map[int]int{} // epoch index -> position in DuplicatesPerCrash
	for i, e := range epochs {
		if crashLike[e.After] {
			crashIdx[i] = len(r.DuplicatesPerCrash)
			r.DuplicatesPerCrash = append(r.DuplicatesPerCrash, 0)
		}
	}
	for i, d := range got.all {
		if d.BadFormat {
			r.BadMessages++
			r.example("bad message at %s/%d@%d: id %q", d.Sink, d.Part, d.Offset, d.ID)
			continue
		}
		if got.first[d.ID] != i {
			r.Duplicates++
			ep := sort.Search(len(epochs), func(j int) bool { return epochs[j].Start.After(d.Arrived) }) - 1
			if k, ok := crashIdx[ep]; ok {
				r.DuplicatesPerCrash[k]++
			} else {
				r.DuplicatesOtherRuns++
			}
			continue
		}
		if discarded[d.ID] {
			// Delivered before the crash, gone from the database: the failover's loss,
			// outside the order check (nothing after it on the new primary follows it).
			r.DiscardedDelivered++
			continue
		}
		if !truth[d.ID] {
			r.Phantoms++
			if states[d.ID] == stRolledBack {
				r.RolledBackDelivered++
				r.example("rolled-back row delivered: %s", d.ID)
			} else {
				r.example("delivered but not in the table: %s (%s)", d.ID, states[d.ID])
			}
			continue
		}
		k := d.Sink + "/" + d.Key
		ks := last[k]
		if ks == nil {
			last[k] = &keyState{sink: d.Sink, part: d.Part, seq: d.Seq}
			continue
		}
		if ks.part != d.Part {
			r.OrderViolations++
			r.example("key %s in partitions %d and %d", k, ks.part, d.Part)
		} else if d.Seq <= ks.seq {
			r.OrderViolations++
			r.example("key %s: seq %d first arrived after seq %d (%s)", k, d.Seq, ks.seq, d.ID)
		}
		if d.Seq > ks.seq {
			ks.seq = d.Seq
		}
		ks.part = d.Part
	}
	for _, n := range r.DuplicatesPerCrash {
		r.MaxDuplicateBurst = max(r.MaxDuplicateBurst, n)
	}
	r.OutboxdRuns = len(epochs)
	return r
}

// Markdown renders the report as a block for a README or PR.
func (r *Report) Markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "### Chaos run: %s (seed %d)\n\n", verdict, r.Seed)
	if r.exactlyOnce() {
		// Computed by verify from the read_committed consumer's deliveries, by event id.
		fmt.Fprintf(&b, "delivery: exactly_once; duplicates seen by a read_committed consumer: %d\n\n", r.Duplicates)
	}
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| fault phase | %.0f s at ~%.0f rows/s, catch-up %.1f s |\n", r.DurationS, r.Rate, r.CatchUpS)
	fmt.Fprintf(&b, "| rows committed | %d (of which uncertain-outcome commits: %d) |\n", r.RowsCommitted, r.RowsUncertainCommitted)
	fmt.Fprintf(&b, "| rows rolled back | %d |\n", r.RowsRolledBack)
	fmt.Fprintf(&b, "| transactions | %v |\n", r.Transactions)
	fmt.Fprintf(&b, "| deliveries | %d |\n", r.Delivered)
	fmt.Fprintf(&b, "| **lost** | **%d** |\n", r.Lost)
	if r.Lost > 0 || r.OffsetsRewritten > 0 || r.RereadError != "" {
		fmt.Fprintf(&b, "| lost rows the topic holds / lacks (fresh read-back) | %d / %d (offsets rewritten %d, consumer offset gaps %d%s) |\n",
			r.LostMissedByConsumer, r.LostInBroker, r.OffsetsRewritten, r.ConsumerOffsetGaps, r.RereadError)
	}
	fmt.Fprintf(&b, "| **order violations** | **%d** |\n", r.OrderViolations)
	fmt.Fprintf(&b, "| rolled-back rows delivered | %d |\n", r.RolledBackDelivered)
	fmt.Fprintf(&b, "| phantom / malformed deliveries | %d / %d |\n", r.Phantoms, r.BadMessages)
	fmt.Fprintf(&b, "| duplicates | %d (after kill -9: %v; other runs: %d) |\n", r.Duplicates, r.DuplicatesPerCrash, r.DuplicatesOtherRuns)
	fmt.Fprintf(&b, "| largest duplicate burst per crash | %d |\n", r.MaxDuplicateBurst)
	if r.Instances > 1 {
		fmt.Fprintf(&b, "| takeover time (%d takeovers) | p50 %.2f s, max %.2f s (not within the bound: %d) |\n",
			len(r.Takeovers), r.TakeoverP50S, r.TakeoverMaxS, r.TakeoverTimeouts)
		if r.exactlyOnce() {
			fmt.Fprintf(&b, "| produces of a deposed leader after the takeover (refused by the broker's fencing) | %d |\n", r.StaleProduces)
		} else {
			fmt.Fprintf(&b, "| **produces of a deposed leader after the takeover** | **%d** |\n", r.StaleProduces)
		}
		fmt.Fprintf(&b, "| leadership terms / superseded exits / leader faults skipped (no leader or no ready standby) | %d / %d / %d |\n",
			r.Terms, r.OutboxdSupersededExits, r.Leaderless)
	}
	if r.Replicated {
		fmt.Fprintf(&b, "| primary failovers (planned switchovers) / replica kill -9 | %d / %d (truth: the outbox table of the primary at the end, %s) |\n", r.Switchovers, r.Faults["replica_kill9"], r.TruthServer)
		fmt.Fprintf(&b, "| crash failovers (kill -9 of the primary, the replica promoted at once) | %d: %d committed rows only the dead primary had (the failover's loss, set apart), %d of them delivered before the crash |\n",
			r.CrashFailovers, r.RowsDiscarded, r.DiscardedDelivered)
		fmt.Fprintf(&b, "| **outboxd's reports of delivered transactions the database no longer has** | **%d** (must be 0 without crash failovers) |\n", r.MissingReports)
		inSync := "yes"
		if r.ReplicaError != "" {
			inSync = "**no**: " + r.ReplicaError
		}
		fmt.Fprintf(&b, "| replica caught up with the primary at the end / source connections per server | %s / %v |\n", inSync, r.SourceConns)
	}
	fmt.Fprintf(&b, "| **rows cleanup deleted that no consumer got** | **%d** (of %d deleted; delivered rows still in the table after the final wait: %d) |\n",
		r.DeletedUndelivered, r.CleanupDeleted, r.LeftDelivered)
	fmt.Fprintf(&b, "| **dark rows (sql_log_bin=0) deleted** | **%d** (committed %d, in the table at the end %d) |\n", r.DarkDeleted, r.DarkRows, r.DarkInTable)
	rc := fmt.Sprintf("%d", r.ReconcileMismatch)
	if r.ReconcileError != "" {
		rc = "**error**: " + r.ReconcileError
	}
	fmt.Fprintf(&b, "| **reconcile vs verifier disagreements** | **%s** (reconcile reported %d missing; rows in the table delivered to nobody: %d; periodic runs: %d) |\n",
		rc, r.ReconcileMissing, r.LeftUndelivered, r.PeriodicReconciles)
	fmt.Fprintf(&b, "| connections through the MariaDB / Kafka proxies | %d / %d |\n", r.MySQLProxyConns, r.KafkaProxyConns)
	fmt.Fprintf(&b, "| outboxd instances / runs / unexpected exits | %d / %d / %d |\n", r.Instances, r.OutboxdRuns, r.OutboxdUnexpectedExits)
	kinds := make([]string, 0, len(r.Faults))
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "| faults (%d) | %s |\n", total, strings.Join(kinds, ", "))
	return b.String()
}
