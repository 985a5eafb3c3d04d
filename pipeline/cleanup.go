package pipeline

import "github.com/outboxd/outboxd/binlog"

// Cleanup is what package cleanup needs to hear from a pipeline: the rows the brokers
// acknowledged and how many of the pipeline's transactions each saved checkpoint covers. A row
// may be deleted by key only once a saved checkpoint covers its transaction (Row.Seq < the
// count passed to Saved); dead-lettered rows are never handed over.
type Cleanup interface {
	// Delivered is called from a lane with the rows of one send that the broker acknowledged
	// (dead letters excluded), before the tracker counts them. It must not block and must not
	// keep the events: they belong to the pipeline.
	Delivered(rows []Row)
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

// ackTracked counts items as acknowledged after handing the delivered ones (not diverted, not
// dead letters from the start) to Cleanup.Delivered. One allocation per send, none per row.
func (p *Pipeline) ackTracked(items []item, diverted bool) {
	if !diverted {
		rows := make([]Row, 0, len(items))
		for i := range items {
			if !items[i].dead {
				rows = append(rows, Row{Seq: items[i].entry.seq, Event: items[i].ev, GTID: items[i].txn.GTID})
			}
		}
		if len(rows) > 0 {
			p.cfg.Cleanup.Delivered(rows)
		}
	}
	p.tracker.ack(items)
}
