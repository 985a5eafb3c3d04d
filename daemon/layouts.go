package daemon

import (
	"context"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/startpos"
	"github.com/outboxd/outboxd/tablelayout"
)

// startLayouts checks, at the start of a term that resumes from the checkpoint, that the
// outbox tables have the layouts the checkpoint was saved under (tablelayout.Check), and makes
// the current layouts the ones saved from now on. A start the operator chose (--from-gtid,
// source.start) has no recorded layouts to check.
func (r *relay) startLayouts(ctx context.Context, start gtid.Set, origin string) error {
	_, db := r.src.Current()
	var now checkpoint.Layouts
	var err error
	switch origin {
	case startpos.OriginCheckpoint, originMissingContinue:
		c, lerr := r.loadCheckpoint(ctx)
		if lerr != nil {
			return lerr
		}
		var recorded checkpoint.Layouts
		if c != nil {
			recorded = c.Layouts
		}
		now, err = tablelayout.Check(ctx, db, r.cfg, recorded, start.String(), r.log)
	default:
		now, err = tablelayout.Current(ctx, db, r.cfg)
	}
	if err != nil {
		return err
	}
	r.saver.layouts.Reset(now)
	return nil
}

// resumeLayouts checks, before a session after a lost connection, that the outbox tables still
// have the layouts of the acknowledged position start: the server may have been altered while
// the stream was away, or a DDL the last session read was not acknowledged yet.
func (r *relay) resumeLayouts(ctx context.Context, start gtid.Set) error {
	_, db := r.src.Current()
	recorded := r.saver.layouts.At(checkpoint.Checkpoint{Flavor: start.Flavor(), GTIDSet: start.String()})
	now, err := tablelayout.Check(ctx, db, r.cfg, recorded, start.String(), r.log)
	if err != nil {
		return err
	}
	r.saver.layouts.Reset(now)
	return nil
}
