package server

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

func TestVarRetention(t *testing.T) {
	for _, c := range []struct {
		vars    map[string]string
		period  time.Duration
		forever bool
		source  string
	}{
		// MySQL 8 defaults: the seconds win.
		{map[string]string{"binlog_expire_logs_seconds": "2592000", "expire_logs_days": "0"}, 30 * 24 * time.Hour, false, "binlog_expire_logs_seconds = 2592000"},
		// MySQL 8 with the seconds at 0: the days apply.
		{map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "7"}, 7 * 24 * time.Hour, false, "expire_logs_days = 7"},
		// MariaDB 10.6+: one setting, the days as a fraction.
		{map[string]string{"binlog_expire_logs_seconds": "600", "expire_logs_days": "0.006944"}, 10 * time.Minute, false, "binlog_expire_logs_seconds = 600"},
		// MariaDB before 10.6: days only.
		{map[string]string{"expire_logs_days": "0.5"}, 12 * time.Hour, false, "expire_logs_days = 0.5"},
		{map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}, 0, true, "binlog_expire_logs_seconds = 0 and expire_logs_days = 0"},
		{map[string]string{}, 0, false, ""},
		// MySQL 8.0.29+ with automatic purging off: the periods do not apply.
		{map[string]string{"binlog_expire_logs_seconds": "600", "binlog_expire_logs_auto_purge": "OFF"}, 0, true, "binlog_expire_logs_auto_purge = OFF"},
		{map[string]string{"binlog_expire_logs_seconds": "600", "binlog_expire_logs_auto_purge": "ON"}, 10 * time.Minute, false, "binlog_expire_logs_seconds = 600"},
	} {
		r, err := varRetention(c.vars)
		if err != nil {
			t.Fatalf("%v: %v", c.vars, err)
		}
		if r.Period != c.period || r.Forever != c.forever || r.Source != c.source {
			t.Errorf("%v: got %+v, want period %v forever %v source %q", c.vars, r, c.period, c.forever, c.source)
		}
	}
	if _, err := varRetention(map[string]string{"binlog_expire_logs_seconds": "x"}); err == nil {
		t.Error("a non-number was accepted")
	}
}

func TestRDSRetention(t *testing.T) {
	if r := rdsRetention(sql.NullString{String: "24", Valid: true}); r.Period != 24*time.Hour || !r.RDS {
		t.Errorf("24 hours: %+v", r)
	}
	if r := rdsRetention(sql.NullString{}); r.Period != rdsNullRetention || r.Forever || !strings.Contains(r.Source, "NULL") {
		t.Errorf("NULL: %+v", r)
	}
}

// A live server reports the retention it was started with, and the oldest binlog's creation time is read over the replication protocol.
func TestRetentionLive(t *testing.T) {
	s, root := setup(t, mariadb.Options{ExtraArgs: []string{"--binlog-expire-logs-seconds=600"}})
	r, err := BinlogRetention(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if r.Period != 10*time.Minute || r.Forever || r.RDS || r.Source != "binlog_expire_logs_seconds = 600" {
		t.Errorf("retention %+v", r)
	}
	// The least privileges outboxd documents are enough for the creation time.
	db := openAs(t, s, root, "relay", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO %s")
	exec(t, root, "FLUSH BINARY LOGS")
	time.Sleep(1100 * time.Millisecond) // binlog timestamps have whole seconds
	exec(t, root, "FLUSH BINARY LOGS")
	before := time.Now()
	o, ok, err := OldestBinlogFile(t.Context(), db, Conn{Flavor: gtid.MariaDB, Addr: s.Addr, User: "relay", Password: "pw"})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	files, err := BinaryLogs(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if o.File != files[0] || len(files) < 3 {
		t.Errorf("oldest %s, files %v", o.File, files)
	}
	var started time.Time
	var up int64
	if err := root.QueryRowContext(t.Context(), "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'").Scan(&up); err != nil {
		t.Fatal(err)
	}
	started = before.Add(-time.Duration(up+2) * time.Second)
	// The first file was created when the server started; the later ones are newer.
	if o.Created.Before(started) || o.Created.After(before.Add(-time.Second)) {
		t.Errorf("oldest binlog created %v, want between server start %v and a second before %v", o.Created, started, before)
	}
	// The newest file is the one of the last FLUSH, more than a second younger.
	last, err := binlogCreated(t.Context(), Conn{Addr: s.Addr, User: "relay", Password: "pw"}, nil, files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	if last.Sub(o.Created) < time.Second {
		t.Errorf("newest binlog %s created %v, not after the oldest's %v", files[len(files)-1], last, o.Created)
	}
	// The read did not leave a dump thread behind.
	var n int
	if err := root.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		time.Sleep(200 * time.Millisecond)
		_ = root.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n)
		if n != 0 {
			t.Errorf("%d binlog dump threads left", n)
		}
	}
}
