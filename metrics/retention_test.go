package metrics

import (
	"testing"
	"time"
)

// The retention gauges start at 0, the ages grow with the clock between samples, and the time
// left is the retention minus the lag: the full retention while caught up, less while stuck,
// negative once the lag passed it.
func TestBinlogRetentionGauges(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	m := New(Options{Now: func() time.Time { return now }, HeartbeatPeriod: time.Second})
	fams := gather(t, m)
	for _, name := range []string{"outboxd_binlog_retention_seconds", "outboxd_binlog_oldest_age_seconds", "outboxd_binlog_retention_remaining_seconds"} {
		if v := value(t, fams, name); v != 0 {
			t.Errorf("%s = %v before a sample, want 0", name, v)
		}
	}
	m.SetBinlogRetention(time.Hour)
	m.SetOldestBinlog(now.Add(-10 * time.Minute))
	fams = gather(t, m)
	if v := value(t, fams, "outboxd_binlog_retention_seconds"); v != 3600 {
		t.Errorf("retention = %v", v)
	}
	if v := value(t, fams, "outboxd_binlog_oldest_age_seconds"); v != 600 {
		t.Errorf("oldest age = %v, want 600", v)
	}
	if v := value(t, fams, "outboxd_binlog_retention_remaining_seconds"); v != 3600 {
		t.Errorf("remaining while caught up = %v, want 3600", v)
	}
	// Stuck on a transaction committed 20 minutes ago, for 50 more minutes.
	m.SetPipeline(&fakePipe{commit: now.Add(-20 * time.Minute), read: now.Add(-20 * time.Minute), ok: true, events: 1})
	if v := value(t, gather(t, m), "outboxd_binlog_retention_remaining_seconds"); v != 2400 {
		t.Errorf("remaining with 20m lag = %v, want 2400", v)
	}
	now = now.Add(50 * time.Minute)
	fams = gather(t, m)
	if v := value(t, fams, "outboxd_binlog_retention_remaining_seconds"); v != -600 {
		t.Errorf("remaining with 70m lag = %v, want -600", v)
	}
	if v := value(t, fams, "outboxd_binlog_oldest_age_seconds"); v != 3600 {
		t.Errorf("oldest age 50m later = %v, want 3600", v)
	}
	// Never purged: no time limit to report.
	m.SetBinlogRetention(0)
	if v := value(t, gather(t, m), "outboxd_binlog_retention_remaining_seconds"); v != 0 {
		t.Errorf("remaining without retention = %v, want 0", v)
	}
}

// The source's binlog times are its clock's: with its clock two days behind this host's, the
// oldest binlog written 10 s ago is 10 s old once the offset is sampled, and the offset is
// exported.
func TestSourceClockOffsetCorrectsBinlogAge(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := New(Options{Now: func() time.Time { return now }})
	m.SetOldestBinlog(now.Add(-48*time.Hour - 10*time.Second))
	if v := value(t, gather(t, m), "outboxd_binlog_oldest_age_seconds"); v != 48*3600+10 {
		t.Fatalf("age before the offset is known = %v", v)
	}
	m.SetSourceClockOffset(-48 * time.Hour)
	fams := gather(t, m)
	if v := value(t, fams, "outboxd_binlog_oldest_age_seconds"); v != 10 {
		t.Fatalf("age = %v, want 10", v)
	}
	if v := value(t, fams, "outboxd_source_clock_offset_seconds"); v != -48*3600 {
		t.Fatalf("offset gauge = %v, want -172800", v)
	}
}
