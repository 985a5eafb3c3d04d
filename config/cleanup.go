package config

import (
	"fmt"
	"regexp"
	"time"
)

// timeZonePattern is what cleanup.time_zone may be: SYSTEM, an offset, or a zone name (the
// server checks that it knows it).
var timeZonePattern = regexp.MustCompile(`^(SYSTEM|[+-]\d{1,2}:\d{2}|[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*)$`)

// Cleanup is the cleanup block, globally (Config.Cleanup) or per outbox table (Table.Cleanup,
// which overrides the global one field by field). Fields left out take the global value, then
// the defaults below. A table is cleaned when a block applies to it and enabled is not false.
type Cleanup struct {
	// Enabled turns cleanup off for one table under a global block (false); default true.
	Enabled *bool `yaml:"enabled"`
	// Retention is how long a delivered row stays: 0 deletes it right after the checkpoint
	// covering it is saved, by the primary key read from the binlog; more needs
	// columns.created_at.
	//
	// In code, a pointer, since 0 is a value and not "unset".
	Retention *time.Duration `yaml:"retention"`
	// Batch is the most rows one DELETE statement (one transaction) removes, 1 to
	// MaxCleanupBatch.
	Batch int `yaml:"batch"`
	// MaxRowsPerSecond bounds the rows deleted per second per table.
	MaxRowsPerSecond int `yaml:"max_rows_per_second"`
	// Interval is how often the created_at sweep runs (and the oldest-row gauge is sampled);
	// at least 1s.
	Interval time.Duration `yaml:"interval"`
	// CommitMargin is how far below the saved checkpoint's commit time a row's created_at must
	// be for the sweep to take it: longer than any transaction stays open between inserting its
	// outbox row and committing (auto-increment and insert time are not commit order); at
	// least 1s.
	CommitMargin time.Duration `yaml:"commit_margin"`
	// TimeZone is the time_zone the application's sessions write a DATETIME created_at in
	// ("SYSTEM", "+00:00", or a zone name the server knows): DATETIME holds wall-clock time
	// without a zone (DEFAULT CURRENT_TIMESTAMP writes the inserting session's zone, not the
	// server's), so the sweep must compare it in that zone, or rows written by sessions
	// behind the server's zone look hours older than they are and go before the checkpoint
	// covers them. Reconcile reads created_at in it too, also with cleanup disabled. Required
	// for a DATETIME created_at (check and run say so); ignored for a TIMESTAMP, which the
	// server stores as an instant.
	//
	// In code, CreatedAtTimeZone resolves it for a table.
	TimeZone string `yaml:"time_zone"`
	// HoldTable is no longer used (the created_at sweep deletes only rows it finds on the
	// broker, so it needs no record of dead letters); still accepted so that existing
	// configurations load, and check and run warn about it.
	HoldTable string `yaml:"hold_table"`
}

// Cleanup defaults and limits.
const (
	DefaultCleanupRetention    = 168 * time.Hour
	DefaultCleanupBatch        = 1000
	DefaultCleanupRate         = 5000
	DefaultCleanupInterval     = time.Minute
	DefaultCleanupCommitMargin = 5 * time.Minute
	// MaxCleanupBatch bounds batch: a larger DELETE is the long lock-holding statement cleanup
	// exists to avoid.
	MaxCleanupBatch = 10_000
)

// CleanupSettings is the cleanup of one table with every field resolved.
type CleanupSettings struct {
	Retention        time.Duration
	Batch            int
	MaxRowsPerSecond int
	Interval         time.Duration
	CommitMargin     time.Duration
	// CreatedAt is the table's columns.created_at ("" when unset): with it the sweep runs.
	CreatedAt string
	// TimeZone is the zone a DATETIME created_at is written in ("" when unset).
	TimeZone string
}

// Sweeps reports whether the created_at sweep runs for the table (it needs the column).
func (s CleanupSettings) Sweeps() bool { return s.CreatedAt != "" }

// CleanupFor returns the resolved cleanup of tables[i] and whether the table is cleaned at all.
// Pure; call after ApplyDefaults.
func (c *Config) CleanupFor(i int) (CleanupSettings, bool) {
	t := c.Tables[i]
	g, own := c.Cleanup, t.Cleanup
	if g == nil && own == nil {
		return CleanupSettings{}, false
	}
	var m Cleanup
	for _, b := range []*Cleanup{g, own} { // the table's own block last: it wins
		if b == nil {
			continue
		}
		if b.Enabled != nil {
			m.Enabled = b.Enabled
		}
		if b.Retention != nil {
			m.Retention = b.Retention
		}
		if b.Batch != 0 {
			m.Batch = b.Batch
		}
		if b.MaxRowsPerSecond != 0 {
			m.MaxRowsPerSecond = b.MaxRowsPerSecond
		}
		if b.Interval != 0 {
			m.Interval = b.Interval
		}
		if b.CommitMargin != 0 {
			m.CommitMargin = b.CommitMargin
		}
		if b.TimeZone != "" {
			m.TimeZone = b.TimeZone
		}
	}
	if m.Enabled != nil && !*m.Enabled {
		return CleanupSettings{}, false
	}
	s := CleanupSettings{
		Retention: DefaultCleanupRetention, Batch: m.Batch, MaxRowsPerSecond: m.MaxRowsPerSecond,
		Interval: m.Interval, CommitMargin: m.CommitMargin, CreatedAt: t.Columns.CreatedAt,
		TimeZone: m.TimeZone,
	}
	if m.Retention != nil {
		s.Retention = *m.Retention
	}
	if s.Batch == 0 {
		s.Batch = DefaultCleanupBatch
	}
	if s.MaxRowsPerSecond == 0 {
		s.MaxRowsPerSecond = DefaultCleanupRate
	}
	setDefaultDur(&s.Interval, DefaultCleanupInterval)
	setDefaultDur(&s.CommitMargin, DefaultCleanupCommitMargin)
	return s, true
}

// CreatedAtTimeZone is the time_zone tables[i]'s DATETIME created_at is written in: its own
// cleanup.time_zone, else the global one, whether cleanup is enabled or not ("" when neither
// is set). The created_at sweep and reconcile share it, so one setting says how the column is
// read. Pure.
func (c *Config) CreatedAtTimeZone(i int) string {
	if own := c.Tables[i].Cleanup; own != nil && own.TimeZone != "" {
		return own.TimeZone
	}
	if c.Cleanup != nil {
		return c.Cleanup.TimeZone
	}
	return ""
}

// CleanupAny reports whether any table is cleaned, and whether any runs the created_at sweep.
// Pure.
func (c *Config) CleanupAny() (on, sweeps bool) {
	for i := range c.Tables {
		if s, ok := c.CleanupFor(i); ok {
			on = true
			sweeps = sweeps || s.Sweeps()
		}
	}
	return on, sweeps
}

func (c *Config) validateCleanup(p *problems) {
	blocks := []struct {
		field string
		b     *Cleanup
	}{{"cleanup", c.Cleanup}}
	for i, t := range c.Tables {
		blocks = append(blocks, struct {
			field string
			b     *Cleanup
		}{fmt.Sprintf("tables[%d].cleanup", i), t.Cleanup})
	}
	for i, bl := range blocks {
		b := bl.b
		if b == nil {
			continue
		}
		f := bl.field + "."
		if b.Retention != nil && *b.Retention < 0 {
			p.add(f+"retention", "must be 0 (delete right after the checkpoint covering a row is saved) or positive, such as %s; got %s", DefaultCleanupRetention, *b.Retention)
		}
		if b.Batch < 0 || b.Batch > MaxCleanupBatch {
			p.add(f+"batch", "must be 1 to %d rows per DELETE (default %d); got %d", MaxCleanupBatch, DefaultCleanupBatch, b.Batch)
		}
		if b.MaxRowsPerSecond < 0 {
			p.add(f+"max_rows_per_second", "must be positive (default %d); got %d", DefaultCleanupRate, b.MaxRowsPerSecond)
		}
		if b.Interval != 0 && b.Interval < time.Second {
			p.add(f+"interval", "must be at least 1s (default %s); got %s", DefaultCleanupInterval, b.Interval)
		}
		if b.CommitMargin != 0 && b.CommitMargin < time.Second {
			p.add(f+"commit_margin", "must be at least 1s, longer than any transaction stays open after inserting its outbox row (default %s); got %s", DefaultCleanupCommitMargin, b.CommitMargin)
		}
		if b.TimeZone != "" && !timeZonePattern.MatchString(b.TimeZone) {
			p.add(f+"time_zone", "must be the time_zone the application writes created_at in: SYSTEM, an offset such as +00:00 or -08:00, or a zone name such as Europe/Berlin; got %q", b.TimeZone)
		}
		if i > 0 && b.HoldTable != "" {
			p.add(f+"hold_table", "is set in the global cleanup block only (one table for every outbox table)")
		}
	}
	anyOn, _ := c.CleanupAny()
	for i, t := range c.Tables {
		s, ok := c.CleanupFor(i)
		if ok && s.Retention > 0 && t.Columns.CreatedAt == "" {
			p.add(fmt.Sprintf("tables[%d].columns.created_at", i), "is required with cleanup.retention %s: name the DATETIME or TIMESTAMP column holding the row's insert time (or use retention: 0, which deletes by the primary keys read from the binlog)", s.Retention)
		}
	}
	if !anyOn {
		return
	}
	// The kafka store names its writer too (validateKafkaCheckpoint asks for it).
	if len(c.Source.Addrs) > 1 && !c.Checkpoint.MySQL() && !c.Checkpoint.Kafka() {
		p.add("cleanup", "deletes on the writable primary, which with several source.addrs only checkpoint.writer_addr names: set checkpoint.store: mysql with checkpoint.writer_addr")
	}
}
