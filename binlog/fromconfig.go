package binlog

import (
	"strings"

	"github.com/outboxd/outboxd/config"
)

// ConfigFrom is the reader's configuration that cfg alone decides: the source, the outbox
// tables and patterns, the heartbeat and read timeout, outboxd's own checkpoint table. The
// caller adds what needs a connection or the process (TLS as negotiated, the column reader,
// the admitter, logger, metrics, layouts). Pure.
func ConfigFrom(cfg *config.Config) Config {
	return Config{
		Flavor:          cfg.Source.Flavor,
		Addr:            cfg.Source.Addr,
		User:            cfg.Source.User,
		Password:        cfg.Source.Password,
		ServerID:        cfg.Source.ServerID,
		Tables:          TableSpecsFrom(cfg),
		Patterns:        TablePatternsFrom(cfg),
		HeartbeatPeriod: config.SourceHeartbeatPeriod,
		ReadTimeout:     cfg.Source.ReadTimeout,
		CheckpointTable: checkpointTable(cfg),
	}
}

// TableSpecsFrom turns the configured outbox tables into the reader's table list; the pattern
// entries are TablePatternsFrom's.
func TableSpecsFrom(cfg *config.Config) []TableSpec {
	specs := make([]TableSpec, 0, len(cfg.Tables))
	for i, t := range cfg.Tables {
		if !t.IsPattern() {
			specs = append(specs, tableSpec(cfg, i))
		}
	}
	return specs
}

// TablePatternsFrom turns the configured tables[].pattern entries into the reader's patterns.
func TablePatternsFrom(cfg *config.Config) []TablePattern {
	idx, pats := cfg.TablePatterns()
	out := make([]TablePattern, len(idx))
	for k, p := range pats {
		schema, table := p.Globs()
		out[k] = TablePattern{Text: p.String(), Schema: schema, Table: table, Spec: tableSpec(cfg, idx[k])}
	}
	return out
}

// tableSpec is the reader's spec of tables[i] (without schema and table for a pattern entry).
func tableSpec(cfg *config.Config, i int) TableSpec {
	t := cfg.Tables[i]
	c := t.Columns
	cl, cleaned := cfg.CleanupFor(i)
	extra, _ := t.ExtraHeaderColumns()
	spec := TableSpec{
		// Cleanup with retention 0 deletes by the keys the binlog carries.
		PrimaryKey: cleaned && cl.Retention == 0,
		Columns: ColumnNames{
			EventID: c.EventID, Key: c.Key, Topic: c.Topic, Payload: c.Payload,
			EventType: c.EventType, Headers: c.Headers,
			Timestamp: c.Timestamp, Partition: c.Partition, Extra: extra,
		},
		OnUpdate: t.OnUpdate,
	}
	if !t.IsPattern() {
		spec.Schema, spec.Table = t.Schema(), t.Name()
	}
	return spec
}

// checkpointTable is the table the reader marks as outboxd's own (zero for the file store).
func checkpointTable(cfg *config.Config) TableRef {
	if !cfg.Checkpoint.MySQL() {
		return TableRef{}
	}
	schema, table, _ := strings.Cut(cfg.Checkpoint.Table, ".")
	return TableRef{Schema: schema, Table: table}
}
