package metrics

import "time"

// SetBinlogRetention records the source's binlog retention (0: it never purges binlogs, or it
// is unknown).
func (m *Metrics) SetBinlogRetention(retention time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.retention = max(0, retention)
	m.mu.Unlock()
	m.binlogRetention.Set(max(0, retention).Seconds())
}

// SetOldestBinlog records the creation time of the source's oldest binlog (zero: unknown, the
// gauge reads 0).
func (m *Metrics) SetOldestBinlog(created time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.oldestBinlog = created
	m.mu.Unlock()
}

// RetentionRemaining estimates how long the binlog of the oldest transaction not yet
// acknowledged stays on the source: the retention minus the lag (negative when it may be gone
// already), 0 when the retention is 0. It is a lower bound: the server purges a whole file
// only once its last write is older than the retention, and only when it rotates binlogs (so
// the file holding a transaction outlives the transaction's commit time plus the retention).
// It uses the lag, not the checkpoint's commit time, because a caught-up relay on a quiet
// database has an old checkpoint commit time and nothing at risk: the server resumes a GTID
// stream from a later file.
func (m *Metrics) RetentionRemaining() time.Duration {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	r := m.retention
	m.mu.Unlock()
	if r == 0 {
		return 0
	}
	return r - m.Lag().Lag
}

func (m *Metrics) oldestBinlogAge() time.Duration {
	m.mu.Lock()
	t := m.oldestBinlog
	m.mu.Unlock()
	if t.IsZero() {
		return 0
	}
	return max(0, m.sourceNow().Sub(t))
}

// SetSourceClockOffset records the source's clock minus this host's (sampled by the leader):
// the lag and age gauges compare the source's commit and binlog times with now on the source's
// clock, so a skew between the two hosts does not show as lag (or hide it). Safe for
// concurrent use.
func (m *Metrics) SetSourceClockOffset(d time.Duration) {
	if m == nil {
		return
	}
	m.srcOffset.Store(int64(d))
	m.clockOffset.Set(d.Seconds())
}

// sourceOffset is the source's clock minus this host's, as last sampled.
func (m *Metrics) sourceOffset() time.Duration { return time.Duration(m.srcOffset.Load()) }

// sourceNow is now on the source's clock, as last sampled.
func (m *Metrics) sourceNow() time.Time { return m.now().Add(m.sourceOffset()) }
