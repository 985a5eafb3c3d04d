// Package reconcile checks, for the outbox rows of a time window that are still in the table,
// that each event_id reached the destination its route gives: the last line of defence behind
// the checkpoint. It only reads: SELECT on the outbox tables, and reads of the destination
// topics (Kafka fetches without a consumer group, RocketMQ pulls that commit no offset).
//
// The data flow, one time slice of the window at a time (slices.go, which bounds the rows held
// whatever the window): rows.go reads the slice's rows, the real router (package router) maps
// each to its sink and topic, and one Reader per sink (kafka.go, rocketmq.go) counts the event
// ids it finds in each topic over the slice widened by a slack. What is not found, or found
// more than once, goes to the Report's lists.
package reconcile

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// Reader reads the messages of one sink. Count adds 1 to counts[id] for each message of topic
// whose event_id header is id, for every id already in counts, reading at least the messages
// whose broker time (Kafka record timestamp, RocketMQ store time) is in [from, to); messages
// outside that range may be counted too. A topic that does not exist counts nothing. Count
// blocks on the broker; it must not write to it. A Reader is used by one goroutine at a time.
type Reader interface {
	Count(ctx context.Context, topic string, from, to time.Time, counts map[string]int) error
	Close() error
}

// TableReader is a Reader that can count only the messages one outbox table sent: CountTable
// is Count of the messages whose outbox_table header is table (schema.table, compared as the
// relay matches table names, case-insensitively). Prove needs it: two tables that route to one
// topic may both use an event id, and the message of one is no proof for the other's row.
type TableReader interface {
	Reader
	CountTable(ctx context.Context, topic, table string, from, to time.Time, counts map[string]int) error
}

// tally is what a reader adds one Count's messages to: counts by event id, of the messages
// table sent ("": of any table).
type tally struct {
	table  string
	counts map[string]int
}

// add counts a message with event id id whose outbox_table header is table.
func (t tally) add(id, table string) {
	if t.table != "" && !strings.EqualFold(table, t.table) {
		return
	}
	if _, ok := t.counts[id]; ok {
		t.counts[id]++
	}
}

// Options says what Run checks.
type Options struct {
	Window Window
	// Before and After widen the broker read around the window (see DefaultSlack); negative
	// values are taken as 0.
	Before, After time.Duration
	// Readers are the readers by sink name; every sink a route or the dead letter names needs one.
	Readers map[string]Reader
	// SliceRows bounds the rows held at once (DefaultSliceRows when 0 or less); see check.
	SliceRows int
	// MaxListed bounds each of the report's lists (DefaultMaxListed when 0 or less): the counts
	// stay exact, the lists keep the earliest entries and Truncated says so.
	MaxListed int

	// proven, set by Prove, is given each slice's proven rows once the slice is evaluated.
	proven func(ctx context.Context, rows []ProvenRow) error
	// table, set by Prove (schema.table), counts only the messages that table sent.
	table string
	// idRows, set by Prove, counts the table's rows (all, not only the window's) with each
	// of ids, byte for byte.
	idRows func(ctx context.Context, ids []string) (map[string]int, error)
}

// Event is one outbox row in a report's lists.
type Event struct {
	EventID   string    `json:"event_id"`
	Table     string    `json:"table"`
	CreatedAt time.Time `json:"created_at"`
	// Sink and Topic are the destination its route gives (the dead letter's for a poison row
	// under on_poison: dead_letter).
	Sink  string `json:"sink,omitempty"`
	Topic string `json:"topic,omitempty"`
	// Rows is how many rows in the window have this event_id (1 unless the ids repeat).
	Rows int `json:"rows"`
	// Found is how many messages with this event_id the destination holds.
	Found int `json:"found"`
	// Reason says why a row has no destination (poison under on_poison: stop).
	Reason string `json:"reason,omitempty"`
}

// Report is Run's result. Every row of the window is counted once in Checked and in exactly one
// of Found, DeadLettered and Missing; Duplicated counts the found ones with more copies than rows
// (event ids repeated in the window are grouped within a slice, see check).
type Report struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// From and To are the broker time range read.
	From         time.Time `json:"read_from"`
	To           time.Time `json:"read_to"`
	Checked      int       `json:"checked"`
	Found        int       `json:"found"`
	DeadLettered int       `json:"dead_lettered"`
	Missing      int       `json:"missing"`
	Duplicated   int       `json:"duplicated"`
	// MissingEvents and DuplicatedEvents list the event ids, ordered by created_at; never nil.
	MissingEvents    []Event `json:"missing_events"`
	DuplicatedEvents []Event `json:"duplicated_events"`
	// Truncated says a list stopped at Options.MaxListed entries (the earliest by created_at);
	// Missing and Duplicated still count them all.
	Truncated bool `json:"lists_truncated"`
	// NullCreatedAt counts the rows of the tables whose created_at is NULL, whatever the
	// window: no window holds them, so no run checks them.
	NullCreatedAt int `json:"null_created_at"`
	// InWindow counts the rows of the window once every slice was read, and Unchecked how many
	// more than Checked that is: rows committed into the window while it was read (a
	// transaction open longer than Until is old), which this run did not check.
	InWindow  int `json:"in_window"`
	Unchecked int `json:"unchecked"`
	// Changed says the window's rows, counted again, are not the rows checked although as many
	// (or fewer): rows deleted while it was read (cleanup) can hide as many committed into it.
	// The rows are told apart by a digest of their event ids (windowDigest), not held.
	Changed bool `json:"changed_while_read"`
	// digest is windowDigest of the rows checked.
	digest uint32
}

// rowDigest is one row's share of a window's digest: the CRC-32 (IEEE) of its event id, as the
// server's CRC32() computes it over the column's bytes; 0 for a NULL or absent event id, which
// SUM skips. Pure.
func rowDigest(id binlog.Field) uint32 {
	if id.Null || id.Missing {
		return 0
	}
	return crc32.ChecksumIEEE(id.Bytes)
}

// completeness compares the rows a run checked with the window's rows counted again after it:
// unchecked is how many more the window holds, changed that the two are other rows (the
// digests, sums of rowDigest modulo 2^32, differ) although no more. Pure.
func completeness(checked int, digest uint32, inWindow int, windowDigest uint32) (unchecked int, changed bool) {
	unchecked = max(inWindow-checked, 0)
	return unchecked, unchecked == 0 && (inWindow != checked || digest != windowDigest)
}

// OK reports whether nothing is missing (duplicates are allowed: at-least-once resends them)
// and every row was checked: none with a NULL created_at, none committed into the window
// while it was read.
func (r Report) OK() bool { return r.Missing == 0 && r.NullCreatedAt == 0 && r.Complete() }

// Complete reports whether every row of the window was checked, so that a periodic run may
// move its mark past the window (NULL created_at rows are in no window and do not hold it).
func (r Report) Complete() bool { return r.Unchecked == 0 && !r.Changed }

// Problems says, one sentence each, why r is not OK; empty when it is.
func (r Report) Problems() []string {
	var out []string
	if r.Missing > 0 {
		out = append(out, fmt.Sprintf("%d of %d event(s) missing", r.Missing, r.Checked))
	}
	if r.Unchecked > 0 {
		out = append(out, fmt.Sprintf("checked %d of %d row(s) in the window: %d were committed into it while it was read (a transaction open longer than the window's end is old); check it again, or end it earlier",
			r.Checked, r.InWindow, r.Unchecked))
	}
	if r.Changed {
		out = append(out, fmt.Sprintf("the window's rows changed while it was read (%d checked, %d there after: rows deleted meanwhile, by cleanup, may hide rows committed into it): check it again",
			r.Checked, r.InWindow))
	}
	if r.NullCreatedAt > 0 {
		out = append(out, fmt.Sprintf("%d row(s) have a NULL created_at, which no window holds: they are never checked; give them a created_at (and make the column NOT NULL)", r.NullCreatedAt))
	}
	return out
}

// ConfigError is a problem of the configuration that only shows against the server (such as a
// created_at column of the wrong type): fix the config, not the data.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// dest is a sink and topic.
type dest struct{ sink, topic string }

// expected is one event_id awaited at a destination.
type expected struct {
	ev    Event
	found int
	// keys are the primary keys of the rows with this event id (Prove only).
	keys [][]any
	// dead is set when the row's route is the dead letter (poison under on_poison: dead_letter).
	dead bool
}

// Run checks the rows of opts.Window in every configured table against the brokers, slice by
// slice (see check): it holds at most opts.SliceRows rows at a time, whatever the window. Each
// slice is read in a read-only transaction of its own on db. It blocks until every destination
// was read. An error means the check could not be completed (a query or a broker read failed);
// the Report is then empty.
func Run(ctx context.Context, db *sql.DB, cfg *config.Config, opts Options) (Report, error) {
	if err := opts.Window.Validate(); err != nil {
		return Report{}, &ConfigError{Err: err}
	}
	rt, err := router.New(cfg)
	if err != nil {
		return Report{}, &ConfigError{Err: err}
	}
	src, err := newTableSource(ctx, db, cfg)
	if err != nil {
		return Report{}, err
	}
	rep, err := check(ctx, cfg, rt, src, opts)
	if err != nil {
		return Report{}, err
	}
	// Counted after the slices: a row that entered the window behind a slice already read is
	// in the count and not in Checked, so the run does not call a window it did not wholly see
	// checked. Rows deleted meanwhile (cleanup) make the count smaller and can hide as many.
	var windowDigest uint32
	if rep.InWindow, windowDigest, rep.NullCreatedAt, err = src.tally(ctx, opts.Window.Since, opts.Window.Until); err != nil {
		return Report{}, err
	}
	rep.Unchecked, rep.Changed = completeness(rep.Checked, rep.digest, rep.InWindow, windowDigest)
	return rep, nil
}

// slice is the rows of one time slice, routed and grouped by destination as they are read:
// only the fields a report names are kept (not the key, topic, headers or event type).
type slice struct {
	rt         *router.Router
	dl         *dest
	checked    int
	digest     uint32 // windowDigest of the rows checked
	byDest     map[dest]map[string]*expected
	unroutable []*expected
	// dests holds each destination's first strings, so that the rows share them (the router
	// renders a topic afresh for each row).
	dests map[dest]dest
	// table, when set (Prove's schema.table), counts only the messages that table sent.
	table string
}

func newSlice(rt *router.Router, dl *dest) *slice {
	return &slice{rt: rt, dl: dl, byDest: map[dest]map[string]*expected{}, dests: map[dest]dest{}}
}

// add routes r and records the event id it awaits at its destination.
func (s *slice) add(r row) {
	s.checked++
	s.digest += rowDigest(r.ev.EventID)
	ev := Event{EventID: string(r.ev.EventID.Bytes), Table: r.table, CreatedAt: r.createdAt, Rows: 1}
	d, dead, reason := destination(s.rt, s.dl, r)
	if reason != "" {
		ev.Reason = reason
		s.unroutable = append(s.unroutable, &expected{ev: ev})
		return
	}
	m := s.byDest[d]
	if m == nil {
		m = map[string]*expected{}
		s.byDest[d] = m
		s.dests[d] = d
	}
	d = s.dests[d]
	e := m[ev.EventID]
	if e != nil {
		e.ev.Rows++
	} else {
		ev.Sink, ev.Topic = d.sink, d.topic
		e = &expected{ev: ev, dead: dead}
		m[ev.EventID] = e
	}
	if r.pk != nil {
		e.keys = append(e.keys, r.pk)
	}
}

// provenRows returns the rows of an evaluated slice that have proof of delivery: their event
// id was found at the topic their route gives at least as often as the slice has rows with
// that id, and, with idRows (Prove), as the whole table has: the slice holds only the rows of
// its created_at range, and a message of a twin in another slice (a repeated event id) must
// not prove both. Rows routed to the dead letter (poison), found only there (dead-lettered by
// the broker's refusal, maybe without their payload), found fewer times than they have rows,
// or not found, have none. It blocks on idRows.
func (s *slice) provenRows(ctx context.Context, idRows func(ctx context.Context, ids []string) (map[string]int, error)) ([]ProvenRow, error) {
	var ids []string
	for _, m := range s.byDest {
		for id, e := range m {
			if !e.dead && e.found >= e.ev.Rows && e.found > 0 {
				ids = append(ids, id)
			}
		}
	}
	var inTable map[string]int
	if idRows != nil && len(ids) > 0 {
		var err error
		if inTable, err = idRows(ctx, ids); err != nil {
			return nil, err
		}
	}
	var out []ProvenRow
	for _, m := range s.byDest {
		for id, e := range m {
			if e.dead || e.found < max(e.ev.Rows, inTable[id]) || e.found <= 0 {
				continue
			}
			for _, k := range e.keys {
				out = append(out, ProvenRow{EventID: []byte(id), PK: k})
			}
		}
	}
	return out, nil
}

// evaluate looks the slice's event ids up at their destinations over the broker times
// [from, to), those not found there again over [from, windowTo), and returns its counts and
// lists (sorted by created_at; Since, Until, From and To are left for the caller).
func (s *slice) evaluate(ctx context.Context, readers map[string]Reader, from, to, windowTo time.Time) (Report, error) {
	rep := Report{Checked: s.checked}
	dl := s.dl
	if err := s.countAt(ctx, readers, s.byDest, from, to); err != nil {
		return Report{}, err
	}
	// A second look, over the rest of the window, for what the slice's range did not hold: a
	// Kafka record that follows one stamped after the range in its partition (a replay after
	// a restart) is past the range's end offset, and a RocketMQ message stored later than
	// the slack (a backlog after an outage) past its end time. The whole window's range is what
	// reconcile read before it had slices, so no row is missing now that was found then. It
	// costs reads only when something is not found, and holds no more than the slice.
	if to.Before(windowTo) {
		again := map[dest]map[string]*expected{}
		for d, m := range s.byDest {
			for id, e := range m {
				if e.found == 0 {
					if again[d] == nil {
						again[d] = map[string]*expected{}
					}
					again[d][id] = e
				}
			}
		}
		if len(again) > 0 {
			if err := s.countAt(ctx, readers, again, from, windowTo); err != nil {
				return Report{}, err
			}
		}
	}
	// Not at its route's topic: under on_poison: dead_letter a row the broker rejected, or whose
	// topic never appeared, went to the dead-letter topic instead. Look there before calling it
	// missing.
	var notFound []*expected
	for _, m := range s.byDest {
		for _, e := range m {
			if e.found == 0 {
				notFound = append(notFound, e)
			}
		}
	}
	if dl != nil && len(notFound) > 0 {
		second := map[string]*expected{}
		for _, e := range notFound {
			if d := (dest{e.ev.Sink, e.ev.Topic}); d != *dl {
				second[e.ev.EventID] = e
			}
		}
		if len(second) > 0 {
			if err := s.countAt(ctx, readers, map[dest]map[string]*expected{*dl: second}, from, windowTo); err != nil {
				return Report{}, err
			}
			for _, e := range second {
				if e.found > 0 {
					rep.DeadLettered += e.ev.Rows
					e.found = -1 // accounted for
				}
			}
		}
	}

	for _, m := range s.byDest {
		for _, e := range m {
			switch {
			case e.found < 0:
			case e.found == 0:
				rep.Missing += e.ev.Rows
				rep.MissingEvents = append(rep.MissingEvents, e.ev)
			default:
				n := min(e.found, e.ev.Rows)
				rep.Found += n
				rep.Missing += e.ev.Rows - n
				if e.found < e.ev.Rows {
					ev := e.ev
					ev.Found = e.found
					rep.MissingEvents = append(rep.MissingEvents, ev)
				}
				if e.found > e.ev.Rows {
					ev := e.ev
					ev.Found = e.found
					rep.Duplicated++
					rep.DuplicatedEvents = append(rep.DuplicatedEvents, ev)
				}
			}
		}
	}
	for _, e := range s.unroutable {
		rep.Missing++
		rep.MissingEvents = append(rep.MissingEvents, e.ev)
	}
	sortEvents(rep.MissingEvents)
	sortEvents(rep.DuplicatedEvents)
	return rep, nil
}

// destination routes r with the real router, as the relay did: the row's commit time is not
// known here, and nothing in the routing depends on it.
// dead is set when the row goes to the dead letter as poison.
func destination(rt *router.Router, dl *dest, r row) (d dest, dead bool, reason string) {
	sinkName, msg, err := rt.Route(&binlog.Txn{CommitTime: r.createdAt}, &r.ev)
	if err == nil {
		return dest{sinkName, msg.Topic}, false, ""
	}
	var pe *router.PoisonError
	if errors.As(err, &pe) && dl != nil {
		return *dl, true, ""
	}
	return dest{}, false, "poison row (on_poison: stop halts the relay on it): " + err.Error()
}

// countAt reads each destination once and records what it found (of s.table's messages
// when it is set).
func (s *slice) countAt(ctx context.Context, readers map[string]Reader, byDest map[dest]map[string]*expected, from, to time.Time) error {
	dests := make([]dest, 0, len(byDest))
	for d := range byDest {
		dests = append(dests, d)
	}
	slices.SortFunc(dests, func(a, b dest) int { return cmp.Or(cmp.Compare(a.sink, b.sink), cmp.Compare(a.topic, b.topic)) })
	for _, d := range dests {
		rd := readers[d.sink]
		if rd == nil {
			return &ConfigError{Err: fmt.Errorf("sinks.%s: no reader for this sink", d.sink)}
		}
		want := byDest[d]
		counts := make(map[string]int, len(want))
		for id := range want {
			counts[id] = 0
		}
		var err error
		if s.table == "" {
			err = rd.Count(ctx, d.topic, from, to, counts)
		} else if tr, ok := rd.(TableReader); ok {
			err = tr.CountTable(ctx, d.topic, s.table, from, to, counts)
		} else {
			return &ConfigError{Err: fmt.Errorf("sinks.%s: its reader cannot tell which table sent a message, which proof of delivery needs", d.sink)}
		}
		if err != nil {
			return fmt.Errorf("sinks.%s topic %s: %w", d.sink, d.topic, err)
		}
		for id, n := range counts {
			if e := want[id]; e != nil {
				e.found = n
			}
		}
	}
	return nil
}

func sortEvents(es []Event) {
	slices.SortFunc(es, func(a, b Event) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Table, b.Table), cmp.Compare(a.EventID, b.EventID))
	})
}
