package ops

import (
	"context"
	"time"

	"github.com/outboxd/outboxd/internal/logging"
	"github.com/outboxd/outboxd/reconcile"
)

// clockSkewWarn is how far the source's clock may be from this host's before the sampler warns:
// the lag and age gauges are corrected by the offset, but the time-based settings
// (reconcile.delay, cleanup.commit_margin, reconcile.slack) assume the clocks agree.
const clockSkewWarn = time.Minute

// clockInterval is how often the leader reads the source's clock: once a minute, as the binlog
// retention, so that outboxd stays at about 0 queries per event on the source (a step of the
// database's clock shows in the lag gauges for up to a minute).
const clockInterval = time.Minute

// clockSampler is the position sampler's state for the source's clock offset.
type clockSampler struct {
	last   time.Time // when the clock was last read
	skewed bool      // the last sample was beyond clockSkewWarn (warned once until it is not)
}

// sampleClock reads the source's clock (NOW(6)), at most every clockEvery, and records its
// offset from this host's, taken at the middle of the query's round trip, for the lag and age
// gauges, which compare the source's commit and binlog times with this host's clock. Only the leader calls it. A skew
// beyond clockSkewWarn is logged once, at warn, until the clocks agree again; a failed read
// keeps the last offset.
func (o *Ops) sampleClock(ctx context.Context, relay Relay, st *clockSampler) {
	_, db := relay.Source()
	if db == nil || (!st.last.IsZero() && time.Since(st.last) < o.clockEvery) {
		return
	}
	st.last = time.Now()
	qctx, cancel := context.WithTimeout(ctx, sampleInterval)
	defer cancel()
	before := time.Now()
	serverNow, err := reconcile.ServerNow(qctx, db)
	if err != nil {
		return
	}
	local := before.Add(time.Since(before) / 2)
	offset := serverNow.Sub(local)
	o.m.SetSourceClockOffset(offset)
	switch {
	case offset.Abs() > clockSkewWarn && !st.skewed:
		st.skewed = true
		o.log.Warn().Str("server_now", logging.Time(serverNow)).Str("local_now", logging.Time(local)).Float64("offset_seconds", offset.Seconds()).
			Msg("the source database's clock is more than a minute from this host's: the lag gauges are corrected by it (outboxd_source_clock_offset_seconds), but reconcile.delay, reconcile.slack and cleanup.commit_margin assume the clocks agree; synchronise both (NTP). Logged once until they agree again")
	case offset.Abs() <= clockSkewWarn && st.skewed:
		st.skewed = false
		o.log.Info().Float64("offset_seconds", offset.Seconds()).Msg("the source database's clock and this host's agree again, within a minute")
	}
}
