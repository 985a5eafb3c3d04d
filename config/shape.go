package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/rmqprops"
	"github.com/outboxd/outboxd/internal/servercheck"
)

// Message shape options: per-table columns placed into the message, and the route's envelope.

// tables[].empty_payload values.
const (
	EmptyPayloadSend      = "send"
	EmptyPayloadTombstone = "tombstone"
	EmptyPayloadPoison    = "poison"
)

// tables[].on_update values.
const (
	OnUpdateIgnore = "ignore"
	OnUpdateWarn   = "warn"
	OnUpdateStop   = "stop"
)

// routes[].format values.
const (
	FormatRaw         = "raw"
	FormatCloudEvents = "cloudevents"
	// DefaultCloudEventsContentType is routes[].cloudevents.content_type's default.
	DefaultCloudEventsContentType = "application/json"
)

// CloudEvents holds a route's CloudEvents attributes (format: cloudevents).
type CloudEvents struct {
	// Source is ce_source; empty means "/outboxd/<schema>.<table>".
	Source string `yaml:"source"`
	// Type is ce_type for rows without an event_type; empty means such a row is poison.
	Type string `yaml:"type"`
	// ContentType is the content-type header (datacontenttype); empty means
	// DefaultCloudEventsContentType.
	ContentType string `yaml:"content_type"`
}

// ReservedHeader reports whether outboxd sets the header name itself (router's Header*
// constants), so neither a row's headers column nor extra_headers may set it. Pure.
func ReservedHeader(name string) bool {
	switch name {
	case "event_id", "event_type", "outbox_table", "outbox_gtid", "outbox_dead_letter_reason", "outbox_dead_letter_code", "outbox_original_topic":
		return true
	}
	return false
}

// CloudEventsHeader reports whether format: cloudevents sets the header name itself; a row's
// headers and extra_headers cannot set it on such a route. Case does not matter: CloudEvents
// SDKs (Go's kafka_sarama, for one) lowercase header names, so "CE_ID" would be a second id.
// Pure.
func CloudEventsHeader(name string) bool {
	switch strings.ToLower(name) {
	case "ce_specversion", "ce_id", "ce_type", "ce_source", "ce_time", "content-type":
		return true
	}
	return false
}

// ExtraHeaderColumns returns extra_headers as two aligned slices sorted by column name: the
// order in which the binlog reader projects the columns and the router places the headers.
// Pure.
func (t Table) ExtraHeaderColumns() (columns, headers []string) {
	columns = make([]string, 0, len(t.ExtraHeaders))
	for c := range t.ExtraHeaders {
		columns = append(columns, c)
	}
	slices.Sort(columns)
	headers = make([]string, len(columns))
	for i, c := range columns {
		headers[i] = t.ExtraHeaders[c]
	}
	return columns, headers
}

// Zone returns the location a DATETIME timestamp column is read in: timestamp_zone, UTC when
// empty. Call after Validate (an unknown zone is UTC here).
func (t Table) Zone() *time.Location {
	if t.TimestampZone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(t.TimestampZone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// kafkaOnly lists the table's options that only a Kafka sink can honour, as field suffixes.
func (t Table) kafkaOnly() []string {
	var out []string
	if t.Columns.Timestamp != "" {
		out = append(out, "columns.timestamp")
	}
	if t.Columns.Partition != "" {
		out = append(out, "columns.partition")
	}
	if t.EmptyPayload == EmptyPayloadTombstone {
		out = append(out, "empty_payload")
	}
	return out
}

func (c *Config) validateShape(p *problems) {
	for i, t := range c.Tables {
		field := fmt.Sprintf("tables[%d]", i)
		for _, col := range []struct{ name, val string }{{"timestamp", t.Columns.Timestamp}, {"partition", t.Columns.Partition}} {
			if strings.ContainsAny(col.val, "`\x00") {
				p.add(field+".columns."+col.name, "%q is not a column name", col.val)
			}
		}
		if t.TimestampZone != "" {
			if t.Columns.Timestamp == "" {
				p.add(field+".timestamp_zone", "is set but columns.timestamp is not; name the DATETIME column it applies to, or remove it")
			} else if t.TimestampZone == "Local" {
				p.add(field+".timestamp_zone", "%q is the zone of the host outboxd runs on, so record times would change with the machine; name the zone the writers use (an IANA name such as Europe/Berlin, or UTC)", t.TimestampZone)
			} else if _, err := time.LoadLocation(t.TimestampZone); err != nil {
				p.add(field+".timestamp_zone", "%q is not a time zone name (use an IANA name such as Europe/Berlin, or UTC): %v", t.TimestampZone, err)
			}
		}
		headers := map[string]string{}
		cols, names := t.ExtraHeaderColumns()
		for k, col := range cols {
			hf := field + ".extra_headers." + col
			name := names[k]
			switch {
			case col == "" || strings.ContainsAny(col, "`\x00"):
				p.add(field+".extra_headers", "%q is not a column name", col)
			case name == "":
				p.add(hf, "is empty; name the header the column is placed in")
			case ReservedHeader(name):
				p.add(hf, "header %q is set by outboxd itself; choose another name", name)
			case headers[name] != "":
				p.add(hf, "header %q is already the header of column %q", name, headers[name])
			}
			headers[name] = col
		}
		switch t.EmptyPayload {
		case "", EmptyPayloadSend, EmptyPayloadTombstone, EmptyPayloadPoison:
		default:
			p.add(field+".empty_payload", "%q is not allowed; use send, tombstone or poison", t.EmptyPayload)
		}
		switch t.OnUpdate {
		case "", OnUpdateIgnore, OnUpdateWarn, OnUpdateStop:
		default:
			p.add(field+".on_update", "%q is not allowed; use ignore, warn or stop", t.OnUpdate)
		}
	}
	for i, r := range c.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		switch r.Format {
		case "", FormatRaw:
			if r.CloudEvents != nil {
				p.add(field+".cloudevents", "is set but format is raw; set format: cloudevents or remove it")
			}
		case FormatCloudEvents:
			if ce := r.CloudEvents; ce != nil {
				if ce.Source != "" && strings.TrimSpace(ce.Source) == "" {
					p.add(field+".cloudevents.source", "is blank; omit it for /outboxd/<schema>.<table>")
				}
				switch {
				case ce.ContentType != "" && !strings.Contains(ce.ContentType, "/"):
					p.add(field+".cloudevents.content_type", "%q is not a media type such as application/json", ce.ContentType)
				case strings.HasPrefix(strings.ToLower(ce.ContentType), "application/cloudevents"):
					// The Kafka binding (3.1): such a content-type says the value is the whole
					// event (structured mode); outboxd sends binary mode, the payload as data.
					p.add(field+".cloudevents.content_type", "%q marks structured mode, but outboxd sends binary mode (the payload is the event's data); give the data's media type, such as application/json", ce.ContentType)
				}
			}
		default:
			p.add(field+".format", "%q is not allowed; use raw or cloudevents", r.Format)
		}
		if r.Format == FormatCloudEvents {
			for j, t := range c.Tables {
				if !routeMayMatch(r, t) {
					continue
				}
				cols, names := t.ExtraHeaderColumns()
				for k, name := range names {
					if CloudEventsHeader(name) {
						p.add(fmt.Sprintf("tables[%d].extra_headers.%s", j, cols[k]), "header %q is set by %s (format: cloudevents) itself; choose another name", name, field)
					}
				}
			}
		}
		s, ok := c.Sinks[r.Sink]
		if !ok || s.Type != SinkRocketMQ {
			continue
		}
		if r.Format == FormatCloudEvents {
			p.add(field+".format", "cloudevents is Kafka only (binary-mode Kafka headers), but sink %q is rocketmq; use format: raw", r.Sink)
		}
		for j, t := range c.Tables {
			if !routeMayMatch(r, t) {
				continue
			}
			for _, f := range t.kafkaOnly() {
				p.add(fmt.Sprintf("tables[%d].%s", j, f), "is Kafka only, but %s sends rows of %s to rocketmq sink %q; remove it or route the table to a Kafka sink",
					field, t.Label(), r.Sink)
			}
			cols, names := t.ExtraHeaderColumns()
			for k, name := range names {
				// The sink would drop the header from every message (with a log line).
				if why := rmqprops.NameProblem(name); why != "" && name != "" {
					p.add(fmt.Sprintf("tables[%d].extra_headers.%s", j, cols[k]), "header %q %s, which %s (rocketmq sink %q) cannot carry; choose another name", name, why, field, r.Sink)
				}
			}
		}
	}
}

// routeMayMatch reports whether r can match rows of t (its table glob matches, or it has none).
func routeMayMatch(r Route, t Table) bool {
	if r.Match.Table == "" {
		return true
	}
	ok, _ := path.Match(r.Match.Table, t.Table)
	return ok || t.IsPattern() // its tables are known only on the server
}

// ShapeColumnProblems checks the types of the table's timestamp and partition columns in
// defs (the table as the server defines it), for check and run; a missing column is
// the problem of preflight.MissingColumns. field is "tables[i]". Pure.
func (t Table) ShapeColumnProblems(field string, defs []servercheck.Column) []servercheck.Problem {
	var ps []servercheck.Problem
	want := []struct {
		col, role, allowed string
		ok                 func(dataType string) bool
	}{
		{t.Columns.Timestamp, "timestamp", "DATETIME, TIMESTAMP or an integer of epoch milliseconds (BIGINT)", func(d string) bool {
			return d == "datetime" || d == "timestamp" || integerType(d)
		}},
		{t.Columns.Partition, "partition", "an integer (INT)", integerType},
	}
	for _, w := range want {
		if w.col == "" {
			continue
		}
		for _, d := range defs {
			if !strings.EqualFold(d.Name, w.col) || w.ok(strings.ToLower(d.DataType)) {
				continue
			}
			ps = append(ps, servercheck.Problem{
				Setting: "column " + t.Table + "." + d.Name, Check: servercheck.TableColumns, Table: t.Table,
				Found: d.ColumnType + " (configured as " + field + ".columns." + w.role + ")",
				Fix:   "set " + field + ".columns." + w.role + " to a column of type " + w.allowed + ", or ALTER TABLE the column to one",
			})
		}
	}
	if t.TimestampZone != "" {
		for _, d := range defs {
			if dt := strings.ToLower(d.DataType); strings.EqualFold(d.Name, t.Columns.Timestamp) && (dt == "timestamp" || integerType(dt)) {
				ps = append(ps, servercheck.Problem{
					Setting: "column " + t.Table + "." + d.Name, Check: servercheck.TableColumns, Table: t.Table, Warning: true,
					Found: d.ColumnType + " (an instant; " + field + ".timestamp_zone applies to DATETIME only)",
					Fix:   "remove " + field + ".timestamp_zone, which changes nothing for this column",
				})
			}
		}
	}
	return ps
}

func integerType(d string) bool {
	switch d {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		return true
	}
	return false
}
