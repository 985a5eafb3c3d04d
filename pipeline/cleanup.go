package pipeline

import (
	"context"
	"time"

	"github.com/outboxd/outboxd/binlog"
)

// Cleanup is what package cleanup needs to hear from a pipeline: the rows the brokers
// acknowledged, the rows that were dead-lettered instead, and how many of the pipeline's
// transactions each saved checkpoint covers. A row may be deleted only once a saved checkpoint
// covers its transaction (Row.Seq < the count passed to Saved), and never when dead-lettered.
type Cleanup interface {
	// Delivered is called from a lane with the rows of one send that the broker acknowledged
	// (dead letters excluded), before the tracker counts them. It must not block and must not
	// keep the events: they belong to the pipeline.
	Delivered(rows []Row)
	// Hold records dead-lettered rows durably before the tracker counts them, so no checkpoint
	// covers a dead-lettered row that cleanup could forget. It blocks until recorded, retrying
	// as it sees fit, and returns an error only when ctx ends first: the rows then stay
	// unacknowledged and are read again by the next start.
	Hold(ctx context.Context, rows []Row) error
	// Saving is called right before each checkpoint save with the commit time it will record:
	// every dead-lettered row of a transaction it covers was passed to Hold already, which
	// cleanup may certify durably. It must be short; a failure only costs cleanup.
	Saving(commit time.Time)
	// Saved is called after every successful checkpoint save with the number of this
	// pipeline's transactions it covers: every Row whose Seq is below n.
	Saved(n uint64)
}

// Row is one delivered or dead-lettered outbox row handed to Cleanup.
type Row struct {
	// Seq numbers the row's transaction in this pipeline.
	Seq   uint64
	Event *binlog.Event
	GTID  string
}

// ackTracked counts items as acknowledged after handing them to Cleanup: dead-lettered ones
// (diverted, or dead letters from the start) to Hold first, the others to Delivered. A
// dead-lettered row whose Hold failed (ctx ended) is not acknowledged: the checkpoint stays
// before it. One allocation per send, none per row.
func (p *Pipeline) ackTracked(ctx context.Context, items []item, diverted bool) {
	cl := p.cfg.Cleanup
	rows := make([]Row, 0, len(items))
	dead := 0
	for i := range items {
		if diverted || items[i].dead {
			dead++
			continue
		}
		rows = append(rows, Row{Seq: items[i].entry.seq, Event: items[i].ev, GTID: items[i].txn.GTID})
	}
	if len(rows) > 0 {
		cl.Delivered(rows)
	}
	if dead == 0 {
		p.tracker.ack(items)
		return
	}
	rows = rows[:0]
	for i := range items {
		if diverted || items[i].dead {
			rows = append(rows, Row{Seq: items[i].entry.seq, Event: items[i].ev, GTID: items[i].txn.GTID})
		}
	}
	if err := cl.Hold(ctx, rows); err != nil {
		kept := make([]item, 0, len(items)-dead)
		for i := range items {
			if !diverted && !items[i].dead {
				kept = append(kept, items[i])
			}
		}
		items = kept
		p.cfg.Logger.Warn().Err(err).Int("rows", dead).Msg("dead-lettered rows not recorded for cleanup; they stay unacknowledged and are read again by the next start")
	}
	if len(items) > 0 {
		p.tracker.ack(items)
	}
}
