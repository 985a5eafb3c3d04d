package server

import (
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// rdsNullRetention is what RDS does with 'binlog retention hours' NULL: it purges a binlog as
// soon as it is no longer needed for its backups, within minutes (AWS documents no exact bound).
const rdsNullRetention = 5 * time.Minute

// Retention is how long the server keeps a binlog file after it was closed.
type Retention struct {
	// Period is the retention; 0 with Forever false means unknown (the server has none of the
	// variables outboxd reads).
	Period time.Duration
	// Forever: the server never purges binlogs by age (every setting is 0).
	Forever bool
	// Source names the setting Period comes from, with its value as the server has it:
	// "binlog_expire_logs_seconds = 600", "expire_logs_days = 7",
	// "mysql.rds_configuration 'binlog retention hours' = 24".
	Source string
	// RDS: Source is mysql.rds_configuration, which RDS and Aurora purge by instead of the
	// server variables.
	RDS bool
}

// Known reports whether the server said how long it keeps binlogs. Pure.
func (r Retention) Known() bool { return r.Forever || r.Period > 0 }

func (r Retention) String() string {
	switch {
	case r.Forever:
		return "forever (" + r.Source + ")"
	case r.Period > 0:
		return r.Period.String() + " (" + r.Source + ")"
	}
	return "unknown (the server has neither binlog_expire_logs_seconds nor expire_logs_days)"
}

// BinlogRetention reads how long the server keeps binlogs: on RDS and Aurora (when
// mysql.rds_configuration is readable) 'binlog retention hours', which RDS purges by; else
// binlog_expire_logs_seconds (MySQL 8, MariaDB 10.6+) when it is not 0, else expire_logs_days.
// A table that is missing or not readable is not an error (not RDS, or no privilege: then the
// variables are what is known). It blocks on two queries. Safe for concurrent use.
func BinlogRetention(ctx context.Context, db *sql.DB) (Retention, error) {
	var hours sql.NullString
	err := db.QueryRowContext(ctx, "SELECT value FROM mysql.rds_configuration WHERE name = 'binlog retention hours'").Scan(&hours)
	if err == nil {
		return rdsRetention(hours), nil
	}
	if ctx.Err() != nil {
		return Retention{}, fmt.Errorf("read binlog retention: %w", ctx.Err())
	}
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('binlog_expire_logs_seconds', 'expire_logs_days', 'binlog_expire_logs_auto_purge')")
	if err != nil {
		return Retention{}, fmt.Errorf("read binlog retention (binlog_expire_logs_seconds, expire_logs_days): %w", err)
	}
	recs, err := ScanAll(rows)
	if err != nil {
		return Retention{}, fmt.Errorf("read binlog retention (binlog_expire_logs_seconds, expire_logs_days): %w", err)
	}
	vars := map[string]string{}
	for _, r := range recs {
		vars[strings.ToLower(r["Variable_name"])] = r["Value"]
	}
	return varRetention(vars)
}

// rdsRetention reads the value of 'binlog retention hours'.
func rdsRetention(hours sql.NullString) Retention {
	src := "mysql.rds_configuration 'binlog retention hours' = "
	if !hours.Valid || strings.EqualFold(hours.String, "NULL") || hours.String == "" {
		return Retention{Period: rdsNullRetention, Source: src + "NULL (RDS purges binlogs within minutes)", RDS: true}
	}
	h, err := strconv.ParseFloat(hours.String, 64)
	if err != nil || h <= 0 {
		return Retention{Period: rdsNullRetention, Source: src + hours.String + " (read as NULL: RDS purges binlogs within minutes)", RDS: true}
	}
	return Retention{Period: time.Duration(h * float64(time.Hour)), Source: src + hours.String, RDS: true}
}

// varRetention decides the retention from binlog_expire_logs_seconds and expire_logs_days as
// MySQL 8 and MariaDB 10.6+ do: the seconds win unless they are 0. On MariaDB the two are one
// setting in two units (expire_logs_days may be a fraction). MySQL 8.0.29+ purges by neither
// when binlog_expire_logs_auto_purge is OFF. Pure.
func varRetention(vars map[string]string) (Retention, error) {
	if v := strings.ToUpper(vars["binlog_expire_logs_auto_purge"]); v == "OFF" || v == "0" {
		return Retention{Forever: true, Source: "binlog_expire_logs_auto_purge = OFF"}, nil
	}
	secs, hasSecs := vars["binlog_expire_logs_seconds"]
	days, hasDays := vars["expire_logs_days"]
	if !hasSecs && !hasDays {
		return Retention{}, nil
	}
	var s, d float64
	var err error
	if hasSecs {
		if s, err = strconv.ParseFloat(secs, 64); err != nil || s < 0 {
			return Retention{}, fmt.Errorf("read binlog retention: binlog_expire_logs_seconds %q is not a number of seconds", secs)
		}
	}
	if hasDays {
		if d, err = strconv.ParseFloat(days, 64); err != nil || d < 0 {
			return Retention{}, fmt.Errorf("read binlog retention: expire_logs_days %q is not a number of days", days)
		}
	}
	switch {
	case s > 0:
		return Retention{Period: time.Duration(s) * time.Second, Source: "binlog_expire_logs_seconds = " + secs}, nil
	case d > 0:
		return Retention{Period: time.Duration(math.Round(d*86400)) * time.Second, Source: "expire_logs_days = " + days}, nil
	}
	src := "expire_logs_days = 0"
	if hasSecs {
		src = "binlog_expire_logs_seconds = 0"
		if hasDays {
			src += " and expire_logs_days = 0"
		}
	}
	return Retention{Forever: true, Source: src}, nil
}

// OldestBinlog is the server's oldest binlog file and when it was created.
type OldestBinlog struct {
	File string
	// Created is the timestamp of the file's FORMAT_DESCRIPTION event, written when the server
	// opened the file (whole seconds). The file's first transaction is at most that old.
	Created time.Time
}

// formatDescriptionEvent is the binlog event type that starts every binlog file.
const formatDescriptionEvent = 15

// binlogDumpNonBlock asks the server to end the dump at the end of the binlog instead of waiting.
const binlogDumpNonBlock = 1

// OldestBinlogFile returns the oldest binlog file (SHOW BINARY LOGS over db) and its creation
// time. SQL shows no binlog timestamps, so the time is read over the replication protocol: a
// one-shot, non-blocking dump of that file (server id 0, as mysqlbinlog
// --read-from-remote-server uses, so it cannot displace a replica or outboxd's own stream) that
// reads the file's FORMAT_DESCRIPTION event and hangs up. c says how to connect (as the
// source account: REPLICATION SLAVE and REPLICATION CLIENT). ok is false when the server has no
// binlog. It blocks on a query and a short connection, at most until ctx ends. Safe for
// concurrent use.
func OldestBinlogFile(ctx context.Context, db *sql.DB, c Conn) (OldestBinlog, bool, error) {
	files, err := BinaryLogs(ctx, db)
	if err != nil {
		return OldestBinlog{}, false, err
	}
	if len(files) == 0 {
		return OldestBinlog{}, false, nil
	}
	tlsCfg := c.TLS
	if tlsCfg != nil && c.TLSFallback {
		if on, err := UsesTLS(ctx, db); err == nil && !on {
			tlsCfg = nil
		}
	}
	created, err := binlogCreated(ctx, c, tlsCfg, files[0])
	if err != nil {
		return OldestBinlog{}, false, fmt.Errorf("read the creation time of the oldest binlog %s: %w", files[0], err)
	}
	return OldestBinlog{File: files[0], Created: created}, true, nil
}

// binlogCreated dumps file from its start and returns its FORMAT_DESCRIPTION event's timestamp.
func binlogCreated(ctx context.Context, c Conn, tlsCfg *tls.Config, file string) (time.Time, error) {
	timeout := dialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(dl), time.Millisecond))
	}
	conn, err := client.ConnectWithContext(ctx, c.Addr, c.User, c.Password, "", timeout, func(cc *client.Conn) error {
		cc.ReadTimeout, cc.WriteTimeout = timeout, timeout
		if tlsCfg != nil {
			cc.SetTLSConfig(tlsCfg)
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	// A checksum-aware client: without it a server that checksums its binlog refuses the dump.
	if _, err := conn.Execute("SET @master_binlog_checksum = 'NONE', @source_binlog_checksum = 'NONE'"); err != nil {
		return time.Time{}, err
	}
	cmd := make([]byte, 4+1+4+2+4+len(file))
	cmd[4] = mysql.COM_BINLOG_DUMP
	binary.LittleEndian.PutUint32(cmd[5:], 4) // the first event after the magic number
	binary.LittleEndian.PutUint16(cmd[9:], binlogDumpNonBlock)
	binary.LittleEndian.PutUint32(cmd[11:], 0) // server id 0: a one-shot reader
	copy(cmd[15:], file)
	conn.ResetSequence()
	if err := conn.WritePacket(cmd); err != nil {
		return time.Time{}, fmt.Errorf("COM_BINLOG_DUMP: %w", err)
	}
	// A fake ROTATE (timestamp 0) comes first, then the file's FORMAT_DESCRIPTION.
	for range 4 {
		p, err := conn.ReadPacket()
		if err != nil {
			return time.Time{}, fmt.Errorf("read binlog event: %w", err)
		}
		switch {
		case len(p) > 0 && p[0] == mysql.ERR_HEADER:
			return time.Time{}, dumpError(p)
		case len(p) > 0 && p[0] == mysql.EOF_HEADER && len(p) < 9:
			return time.Time{}, errors.New("the server ended the dump before a FORMAT_DESCRIPTION event")
		case len(p) < 1+19:
			return time.Time{}, fmt.Errorf("short binlog event packet (%d bytes)", len(p))
		}
		ts := binary.LittleEndian.Uint32(p[1:])
		if p[1+4] == formatDescriptionEvent && ts != 0 {
			return time.Unix(int64(ts), 0), nil
		}
	}
	return time.Time{}, errors.New("no FORMAT_DESCRIPTION event at the start of the file")
}

// dumpError turns an ERR packet into an error: code, then '#', SQL state and the message.
func dumpError(p []byte) error {
	if len(p) < 3 {
		return errors.New("malformed error packet")
	}
	code := binary.LittleEndian.Uint16(p[1:])
	msg := p[3:]
	if len(msg) > 6 && msg[0] == '#' {
		msg = msg[6:]
	}
	return fmt.Errorf("ERROR %d: %s", code, msg)
}
