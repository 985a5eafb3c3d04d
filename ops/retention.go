package ops

import (
	"context"
	"time"

	"github.com/outboxd/outboxd/server"
)

// retentionInterval is how often the leader reads the source's binlog retention and the age of
// its oldest binlog: a variable query, SHOW BINARY LOGS and a short dump connection, so not at
// every position sample.
const retentionInterval = time.Minute

// retentionSampler is the position sampler's state for the retention gauges.
type retentionSampler struct {
	last    time.Time // when the last sample was taken; zero: take one now
	failing bool      // the last sample failed (logged once until one succeeds)
}

// sampleRetention updates the retention gauges when the last sample is retentionInterval old.
// Only the leader calls it (a standby queries nothing). A failure is logged once, at warn, until
// a sample succeeds again; a gauge that could not be read keeps its last value.
func (o *Ops) sampleRetention(ctx context.Context, relay Relay, st *retentionSampler) {
	now := time.Now()
	if !st.last.IsZero() && now.Sub(st.last) < retentionInterval {
		return
	}
	st.last = now
	qctx, cancel := context.WithTimeout(ctx, sampleInterval)
	defer cancel()
	// Each gauge on its own: the retention (and the alert on it) must not depend on the dump
	// connection the oldest binlog's age needs.
	addr, db := relay.Source()
	r, err := server.BinlogRetention(qctx, db)
	if err == nil {
		o.m.SetBinlogRetention(r.Period)
		var oldest server.OldestBinlog
		if oldest, _, err = server.OldestBinlogFile(qctx, db, server.SourceConn(o.cfg.SourceAt(addr))); err == nil {
			o.m.SetOldestBinlog(oldest.Created)
		}
	}
	switch {
	case err != nil && ctx.Err() == nil && !st.failing:
		st.failing = true
		o.log.Warn().Err(err).Msg("binlog retention not sampled: the outboxd_binlog_retention and oldest_age gauges keep their last values; the source account needs REPLICATION SLAVE and REPLICATION CLIENT")
	case err == nil && st.failing:
		st.failing = false
		o.log.Info().Msg("binlog retention sampled again")
	}
}
