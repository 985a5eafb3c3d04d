package main

// Timestamps along the path of each message of the single-connection steady probe (steady1), so
// its latency splits into where it was spent instead of being guessed at:
//
//	due       the generator's schedule (start + i/rate)
//	sent      the generator sent the INSERT (autocommit)
//	commit    the INSERT (the COMMIT) returned to the generator
//	tap       an independent go-mysql reader in the harness decoded the row from the binlog
//	broker    the produce request carrying the row reached kfake (a Produce control hook in the
//	          broker process, wall clock)
//	recv      the franz-go consumer received it
//
// Everything but broker is the harness's monotonic clock; broker is the broker process's wall
// clock converted with the harness's epoch (both read the same system clock).

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfakeStampsEnv, set for a kfake child, names the file it writes "event_id wall_ns" lines to
// when it exits: when each record's produce request reached it.
const kfakeStampsEnv = "OUTBOXD_BENCH_KFAKE_STAMPS"

// brokerStamps collects the arrival of each produced record (by its event_id header) in kfake.
type brokerStamps struct {
	mu    sync.Mutex
	lines []string
}

// hook installs a Produce control function on c that stamps every record and lets kfake handle
// the request as usual.
func (b *brokerStamps) hook(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		now := time.Now().UnixNano()
		pr, ok := req.(*kmsg.ProduceRequest)
		if !ok {
			return nil, nil, false
		}
		var ids []string
		for _, t := range pr.Topics {
			for _, p := range t.Partitions {
				ids = appendEventIDs(ids, p.Records)
			}
		}
		b.mu.Lock()
		for _, id := range ids {
			b.lines = append(b.lines, id+" "+strconv.FormatInt(now, 10))
		}
		b.mu.Unlock()
		return nil, nil, false
	})
}

// appendEventIDs appends the event_id header of every record in the uncompressed record batches of
// raw (compressed batches are skipped: the relays measured here send none).
func appendEventIDs(ids []string, raw []byte) []string {
	for len(raw) >= 12 {
		n := 12 + int(int32(binary.BigEndian.Uint32(raw[8:12])))
		if n > len(raw) || n < 12 {
			return ids
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw[:n]); err != nil || rb.Attributes&0x7 != 0 {
			raw = raw[n:]
			continue
		}
		recs := rb.Records
		for k := 0; k < int(rb.NumRecords) && len(recs) > 0; k++ {
			l, vn := binary.Varint(recs)
			if vn <= 0 || int(l)+vn > len(recs) {
				break
			}
			var r kmsg.Record
			if err := r.ReadFrom(recs[:vn+int(l)]); err == nil {
				for _, h := range r.Headers {
					if h.Key == "event_id" {
						ids = append(ids, string(h.Value))
					}
				}
			}
			recs = recs[vn+int(l):]
		}
		raw = raw[n:]
	}
	return ids
}

func (b *brokerStamps) write(path string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return os.WriteFile(path, []byte(strings.Join(b.lines, "\n")+"\n"), 0o644)
}

// loadBrokerStamps reads a stamps file into tr's broker stamps (harness clock, first copy wins)
// for the ids of run. It does not block.
func loadBrokerStamps(path, prefix string, run int, epoch time.Time, broker []int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("broker stamps: %w", err)
	}
	defer f.Close()
	e := epoch.UnixNano()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, ns, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		w, i, ok := parseEventID(prefix, id)
		if !ok || w != run || i >= len(broker) {
			continue
		}
		v, err := strconv.ParseInt(ns, 10, 64)
		if err == nil && broker[i] == 0 {
			broker[i] = v - e + 1
		}
	}
	return sc.Err()
}

// binlogTap is an independent go-mysql reader in the harness that stamps when each outbox row of
// a run appears in the binlog stream (decoded), on the harness's clock.
type binlogTap struct {
	stamps []atomic.Int64
	prefix string
	run    int
	cancel context.CancelFunc
	done   chan error
}

// startTap reads from start until stop. It does not block.
func startTap(h *harness, start, prefix string, run, capacity int) (*binlogTap, error) {
	cfg, err := syncerConfig(h.srv.Addr, uint32(h.serverID()), benchSchema, "outbox_event")
	if err != nil {
		return nil, err
	}
	set, err := mysql.ParseMariadbGTIDSet(start)
	if err != nil {
		return nil, err
	}
	syncer := replication.NewBinlogSyncer(cfg)
	streamer, err := syncer.StartSyncGTID(set)
	if err != nil {
		syncer.Close()
		return nil, fmt.Errorf("binlog tap: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &binlogTap{stamps: make([]atomic.Int64, capacity), prefix: prefix, run: run, cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer syncer.Close()
		for {
			ev, err := streamer.GetEvent(ctx)
			if err != nil {
				t.done <- err
				return
			}
			now := int64(time.Since(h.epoch)) + 1
			re, ok := ev.Event.(*replication.RowsEvent)
			if !ok || re.Type() != replication.EnumRowsEventTypeInsert {
				continue
			}
			for _, row := range re.Rows {
				if len(row) <= colEventID {
					continue
				}
				w, i, ok := parseEventID(prefix, string(asBytes(row[colEventID])))
				if ok && w == run && i < len(t.stamps) {
					t.stamps[i].CompareAndSwap(0, now)
				}
			}
		}
	}()
	return t, nil
}

func (t *binlogTap) stop() {
	t.cancel()
	<-t.done
}

// Segment is one leg of the probe's path, over the messages that have both stamps (ms; negative
// when the second stamp came first, e.g. the binlog before COMMIT returned).
type Segment struct {
	Name   string  `json:"name"`
	Count  int     `json:"count"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	MeanMS float64 `json:"mean_ms"`
	// SlowMeanMS is the segment's mean over the slowest 1% of messages end to end (commit → recv):
	// where the p99 messages spent their time.
	SlowMeanMS float64 `json:"slow_mean_ms"`
}

// breakdown computes the probe's segments from tr and the tap and broker stamps (either may be nil).
func breakdown(tr *tracker, tap []atomic.Int64, broker []int64, rate float64) []Segment {
	n := len(tr.commit)
	get := func(name string, i int) int64 {
		switch name {
		case "due":
			if s := tr.start.Load(); s != 0 {
				return s + int64(float64(i)/rate*1e9)
			}
		case "sent":
			return tr.sent[i].Load()
		case "commit":
			return tr.commit[i].Load()
		case "tap":
			if tap != nil {
				return tap[i].Load()
			}
		case "broker":
			if broker != nil {
				return broker[i]
			}
		case "recv":
			return tr.recv[i].Load()
		}
		return 0
	}
	// The slowest 1% end to end.
	type e2e struct {
		i int
		d int64
	}
	var all []e2e
	for i := 0; i < n; i++ {
		if c, r := get("commit", i), get("recv", i); c != 0 && r != 0 {
			all = append(all, e2e{i, r - c})
		}
	}
	slices.SortFunc(all, func(a, b e2e) int { return int(b.d - a.d) })
	slow := all
	if len(all) > 0 {
		slow = all[:max(1, len(all)/100)]
	}
	legs := []struct{ name, from, to string }{
		{"generator lag: due → INSERT sent", "due", "sent"},
		{"INSERT+COMMIT round trip: sent → COMMIT returned", "sent", "commit"},
		{"COMMIT returned → row decoded by an independent binlog reader", "commit", "tap"},
		{"independent reader → produce request at the broker (the relay)", "tap", "broker"},
		{"produce request at the broker → consumer received", "broker", "recv"},
		{"end to end: COMMIT returned → consumer received", "commit", "recv"},
	}
	var out []Segment
	for _, l := range legs {
		var ms []float64
		for i := 0; i < n; i++ {
			a, b := get(l.from, i), get(l.to, i)
			if a != 0 && b != 0 && get("commit", i) != 0 {
				ms = append(ms, float64(b-a)/1e6)
			}
		}
		if len(ms) == 0 {
			continue
		}
		var slowSum float64
		slowN := 0
		for _, s := range slow {
			a, b := get(l.from, s.i), get(l.to, s.i)
			if a != 0 && b != 0 {
				slowSum += float64(b-a) / 1e6
				slowN++
			}
		}
		var sum float64
		for _, v := range ms {
			sum += v
		}
		slices.Sort(ms)
		sg := Segment{Name: l.name, Count: len(ms), P50MS: percentile(ms, 50), P90MS: percentile(ms, 90),
			P99MS: percentile(ms, 99), MaxMS: ms[len(ms)-1], MeanMS: sum / float64(len(ms))}
		if slowN > 0 {
			sg.SlowMeanMS = slowSum / float64(slowN)
		}
		out = append(out, sg)
	}
	return out
}

// writeStampsTSV writes every committed message's stamps (wall-clock ns, 0 for none) to path, one
// line each: i, due, sent, commit, tap, broker, recv. For offline analysis (-keep keeps the file).
func writeStampsTSV(path string, epoch time.Time, tr *tracker, tap []atomic.Int64, broker []int64, rate float64) error {
	var b strings.Builder
	b.WriteString("i\tdue\tsent\tcommit\ttap\tbroker\trecv\n")
	e := epoch.UnixNano() - 1 // harness stamps are ns since epoch plus one
	wall := func(v int64) int64 {
		if v == 0 {
			return 0
		}
		return v + e
	}
	for i := range tr.commit {
		c := tr.commit[i].Load()
		if c == 0 {
			continue
		}
		var t, bk int64
		if tap != nil {
			t = tap[i].Load()
		}
		if broker != nil {
			bk = broker[i]
		}
		due := tr.start.Load() + int64(float64(i)/rate*1e9)
		fmt.Fprintf(&b, "%d\t%d\t%d\t%d\t%d\t%d\t%d\n", i, wall(due), wall(tr.sent[i].Load()), wall(c), wall(t), wall(bk), wall(tr.recv[i].Load()))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
