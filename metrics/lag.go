package metrics

import "time"

// LagInput is everything lag is computed from: the pipeline's oldest unacknowledged
// transaction and the reader's knowledge of the newest position.
type LagInput struct {
	Now time.Time
	// SourceOffset is the source's clock minus this host's (0: unknown, or none). Commit times
	// are the source's clock and are compared with Now plus it; read and heartbeat times are
	// this host's. Without it a database clock days behind this host's shows days of lag on a
	// relay that is caught up, and one ahead hides real lag up to the offset.
	SourceOffset time.Duration
	// Pending is set when a transaction read is not yet fully acknowledged; OldestCommit and
	// OldestRead are then the commit and read times of the oldest such one.
	Pending                  bool
	OldestCommit, OldestRead time.Time
	// NewestCommit is the commit time of the newest complete transaction read (zero: none yet).
	NewestCommit time.Time
	// ReadSeq counts the complete transactions read; HeartbeatSeq is ReadSeq when the last
	// heartbeat arrived, at LastHeartbeat (zero: none yet).
	ReadSeq, HeartbeatSeq uint64
	LastHeartbeat         time.Time
	HeartbeatPeriod       time.Duration
}

// LagResult holds the computed gauges.
type LagResult struct {
	// Lag is outboxd_lag_seconds.
	Lag time.Duration
	// OldestUnacked is outboxd_oldest_unacked_event_age_seconds.
	OldestUnacked time.Duration
	// CaughtUp is set when the lag is 0 because a recent heartbeat proved the server had
	// nothing newer and nothing was pending.
	CaughtUp bool
}

// heartbeatGrace is how many heartbeat periods a heartbeat's proof of being caught up lasts.
const heartbeatGrace = 3

// ComputeLag applies the lag rules. Pure; safe for concurrent use.
//
// Commit times are the source's clock: they are compared with now on that clock (SourceOffset).
//
//   - A transaction not yet fully acknowledged: lag is now minus its commit time, and the
//     oldest-unacked age is now minus when it was read. Both grow while the pipeline is stuck.
//   - Nothing pending, and the last heartbeat came after the newest transaction read: the server
//     had nothing newer, so lag is 0, for heartbeatGrace periods; after that (heartbeats stopped:
//     the connection is gone or stalled) lag counts from the last heartbeat.
//   - Nothing pending, but transactions were read since the last heartbeat (a busy server sends
//     none): now minus the newest one's commit time.
//   - Nothing read and no heartbeat yet: 0.
func ComputeLag(in LagInput) LagResult {
	since := func(t time.Time) time.Duration { return max(0, in.Now.Sub(t)) }
	sinceCommit := func(t time.Time) time.Duration { return max(0, in.Now.Add(in.SourceOffset).Sub(t)) }
	if in.Pending {
		return LagResult{Lag: sinceCommit(in.OldestCommit), OldestUnacked: since(in.OldestRead)}
	}
	if !in.LastHeartbeat.IsZero() && in.HeartbeatSeq == in.ReadSeq {
		stale := since(in.LastHeartbeat)
		if stale <= heartbeatGrace*in.HeartbeatPeriod {
			return LagResult{CaughtUp: true}
		}
		return LagResult{Lag: stale}
	}
	if !in.NewestCommit.IsZero() {
		return LagResult{Lag: sinceCommit(in.NewestCommit)}
	}
	return LagResult{}
}
