package reconcile

import (
	"context"
	"math"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/router"
)

// DefaultSliceRows bounds the rows a run holds at once: about 25 MB of event ids, table names,
// created_at times and counts (the key, topic, event type and headers columns are only read to
// route a row and are not kept).
const DefaultSliceRows = 100_000

// DefaultMaxListed bounds each of the report's lists. A window where everything went missing
// (a topic deleted) would otherwise list every row of it; the counts stay exact.
const DefaultMaxListed = 100_000

const (
	// firstSliceWidth is the first slice's length; later ones adapt to the rows found.
	firstSliceWidth = time.Minute
	// minSliceWidth is the smallest slice (created_at has microseconds at most): rows sharing
	// one created_at cannot be split, so such a slice is read whole (see check).
	minSliceWidth = time.Microsecond
)

// rowSource reads the outbox rows with created_at in [since, until). read calls fn for each
// row, at most limit+1 times when limit > 0, and reports full when there were more than limit
// (the caller then discards what fn was given and asks for a narrower range). limit 0 reads
// every row of the range. read blocks on the database; after an error fn's rows are partial.
type rowSource interface {
	read(ctx context.Context, since, until time.Time, limit int, fn func(row)) (full bool, err error)
}

// check runs the reconciliation of opts.Window over src in time slices, so that memory is
// bounded by opts.SliceRows whatever the window:
//
//   - Slices. The rows of [t, t+w) are read (at most SliceRows+1 of them: more halves w and
//     reads the slice again; fewer than a quarter doubles the next w), routed, and checked
//     against the records of broker time [t - Before, t + w + After) at their destinations,
//     then dropped: a slice's report is added to the total and its lists appended, so the
//     lists stay in created_at order. An empty slice reads no broker.
//   - No false missing at a slice edge. A row's record is stamped up to Before earlier and up
//     to After later than its created_at (the slack): whatever slice the row falls in, that
//     range lies inside the slice's broker range.
//   - Duplicates. Each row is in exactly one slice, and only that slice asks for its event id,
//     so each copy is counted once, also a copy stamped in a neighbouring slice's time: every
//     copy within the slack of its row's created_at is counted, and a copy farther off is
//     counted only when it is inside the row's slice's broker range (before, the whole
//     window's). Rows that repeat one event_id are grouped per slice: two such rows in two
//     slices are two checks of one row each, and a copy within reach of both counts in both.
//     Counting every copy of an id anywhere in the window would mean holding every id of the
//     window, which is what the slices avoid.
//   - Kafka's end offset per partition is the first record stamped at or after the slice's
//     broker range end (ListOffsets): a record that follows it in the partition with an
//     earlier stamp (a replay after a restart sits behind what was sent before the crash) is
//     not read in the slice's range. The ids not found there are looked for again over the
//     rest of the window, [t - Before, Until + After), as reconcile read before it had slices:
//     no row is missing that was found then (RocketMQ messages stored later than the slack,
//     a backlog after an outage, too). A copy of a found id behind such a record is not
//     counted as a duplicate: counting those exactly would need every partition read to its
//     end for every slice, or every id of the window held. See the README.
//   - Reads. Consecutive slices' broker ranges overlap by Before + After, read once per slice:
//     the broker reads are (w + Before + After) / w times the window's records, the price of
//     the bound. A larger SliceRows, or a smaller slack, reads less.
//   - Rows sharing one created_at value (a DATETIME without fraction at a high rate) cannot be
//     split: a slice of minSliceWidth is read whole, so the bound is the larger of SliceRows
//     and the rows of one created_at value.
//
// Each slice is its own read-only transaction: slices are disjoint in created_at, so a row is
// read at most once without one snapshot held, which would keep InnoDB from purging old row
// versions for the whole run.
func check(ctx context.Context, cfg *config.Config, rt *router.Router, src rowSource, opts Options) (Report, error) {
	before, after := max(opts.Before, 0), max(opts.After, 0)
	limit := opts.SliceRows
	if limit <= 0 {
		limit = DefaultSliceRows
	}
	maxListed := opts.MaxListed
	if maxListed <= 0 {
		maxListed = DefaultMaxListed
	}
	w := opts.Window
	from, to := w.Range(before, after)
	rep := Report{Since: w.Since, Until: w.Until, From: from, To: to,
		MissingEvents: []Event{}, DuplicatedEvents: []Event{}} // [] in JSON, never null
	var dl *dest
	if cfg.DeadLetter != nil && cfg.OnPoison == config.OnPoisonDeadLetter {
		dl = &dest{cfg.DeadLetter.Sink, cfg.DeadLetter.Topic}
	}
	total := w.Until.Sub(w.Since) // saturates at the largest Duration for a very wide window
	width := min(firstSliceWidth, total)
	for t := w.Since; t.Before(w.Until); {
		end := w.Until
		if left := w.Until.Sub(t); width < left {
			end = t.Add(width)
		}
		lim := limit
		if end.Sub(t) <= minSliceWidth {
			lim = 0 // one created_at value: cannot be split
		}
		s := newSlice(rt, dl)
		s.table = opts.table
		full, err := src.read(ctx, t, end, lim, s.add)
		if err != nil {
			return Report{}, err
		}
		if full {
			width = max(end.Sub(t)/2, minSliceWidth)
			continue
		}
		sf, st := (Window{Since: t, Until: end}).Range(before, after)
		part, err := s.evaluate(ctx, opts.Readers, sf, st, to)
		if err != nil {
			return Report{}, err
		}
		if opts.proven != nil {
			rows, err := s.provenRows(ctx, opts.idRows)
			if err != nil {
				return Report{}, err
			}
			if err := opts.proven(ctx, rows); err != nil {
				return Report{}, err
			}
		}
		part.digest = s.digest
		rep.add(part, maxListed)
		if s.checked < limit/4 && width < math.MaxInt64/2 {
			width = min(2*width, total)
		}
		t = end
	}
	return rep, nil
}

// add adds a slice's report, later in created_at than what r holds, keeping each list to at
// most maxListed entries.
func (r *Report) add(p Report, maxListed int) {
	r.Checked += p.Checked
	r.digest += p.digest
	r.Found += p.Found
	r.DeadLettered += p.DeadLettered
	r.Missing += p.Missing
	r.Duplicated += p.Duplicated
	appendUpTo := func(list, more []Event) []Event {
		if room := maxListed - len(list); len(more) > room {
			r.Truncated = true
			more = more[:max(room, 0)]
		}
		return append(list, more...)
	}
	r.MissingEvents = appendUpTo(r.MissingEvents, p.MissingEvents)
	r.DuplicatedEvents = appendUpTo(r.DuplicatedEvents, p.DuplicatedEvents)
}

// Merge adds the report of the next window (later than r's, back to back) to r, as one report
// of both: the counts add up, the lists keep DefaultMaxListed entries each, and NullCreatedAt,
// a count of the whole tables, is the later one's. A zero r takes p's window.
func (r *Report) Merge(p Report) {
	if r.Since.IsZero() {
		r.Since, r.From = p.Since, p.From
		r.MissingEvents, r.DuplicatedEvents = []Event{}, []Event{}
	}
	r.Until, r.To = p.Until, p.To
	r.add(p, DefaultMaxListed)
	r.Truncated = r.Truncated || p.Truncated
	r.InWindow += p.InWindow
	r.Unchecked += p.Unchecked
	r.Changed = r.Changed || p.Changed
	r.NullCreatedAt = p.NullCreatedAt
}
