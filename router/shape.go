package router

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/sink"
)

// CloudEvents binary-mode header names (the CloudEvents Kafka protocol binding, section 3.2:
// "ce_" and the attribute name; datacontenttype maps to the Kafka content-type header).
const (
	HeaderCESpecVersion = "ce_specversion"
	HeaderCEID          = "ce_id"
	HeaderCEType        = "ce_type"
	HeaderCESource      = "ce_source"
	HeaderCETime        = "ce_time"
	HeaderContentType   = "content-type"
	// CESpecVersion is the CloudEvents version outboxd writes.
	CESpecVersion = "1.0"
)

// tableShape is a table's message-shape options (config.Table), compiled. Only tables with
// some option set have one, so the common row costs one map miss.
type tableShape struct {
	field                  string // "tables[i]", for poison reasons
	zone                   *time.Location
	timestampCol, partCol  string // "" when not configured
	extraCols, extraHeader []string
	emptyPayload           string
}

// ceRoute is a route's CloudEvents attributes with the defaults applied.
type ceRoute struct {
	source      string // "" means /outboxd/<schema>.<table>
	typ         string
	contentType []byte
}

type tableKey struct{ schema, table string }

func newShape(i int, t config.Table) *tableShape {
	cols, names := t.ExtraHeaderColumns()
	sh := &tableShape{
		field: fmt.Sprintf("tables[%d]", i), zone: t.Zone(),
		timestampCol: t.Columns.Timestamp, partCol: t.Columns.Partition,
		extraCols: cols, extraHeader: names, emptyPayload: t.EmptyPayload,
	}
	if sh.emptyPayload == "" {
		sh.emptyPayload = config.EmptyPayloadSend
	}
	if sh.timestampCol == "" && sh.partCol == "" && len(cols) == 0 && sh.emptyPayload == config.EmptyPayloadSend {
		return nil
	}
	return sh
}

func newCERoute(rc config.Route) *ceRoute {
	if rc.Format != config.FormatCloudEvents {
		return nil
	}
	ce := &ceRoute{contentType: []byte(config.DefaultCloudEventsContentType)}
	if c := rc.CloudEvents; c != nil {
		ce.source, ce.typ = c.Source, c.Type
		if c.ContentType != "" {
			ce.contentType = []byte(c.ContentType)
		}
	}
	return ce
}

// shapeOf returns ev's table options, nil when it has none.
func (r *Router) shapeOf(ev *binlog.Event) *tableShape {
	if sh := r.shapes[tableKey{ev.Schema, ev.Table}]; sh != nil {
		return sh
	}
	if p := r.patternOf(ev); p != nil {
		return p.shape
	}
	return nil
}

// tombstoneNull reports whether a NULL payload of ev's table is a tombstone, not poison.
func (r *Router) tombstoneNull(ev *binlog.Event) bool {
	sh := r.shapeOf(ev)
	return sh != nil && sh.emptyPayload == config.EmptyPayloadTombstone
}

// applyShape applies the table's options to msg: the value of an empty payload, the record
// time, the partition and the extra headers. It returns why the row is poison, or "".
func (sh *tableShape) apply(ev *binlog.Event, msg *sink.Message) string {
	if ev.Payload.Null || len(ev.Payload.Bytes) == 0 {
		switch sh.emptyPayload {
		case config.EmptyPayloadTombstone:
			if msg.Key == nil {
				return fmt.Sprintf("the payload is empty and %s.empty_payload is tombstone, but the key is NULL: Kafka keeps no keyless tombstone", sh.field)
			}
			msg.Value = nil
		case config.EmptyPayloadPoison:
			return fmt.Sprintf("the payload is empty (%s.empty_payload: poison)", sh.field)
		}
	}
	if sh.timestampCol != "" {
		t, ok, reason := recordTime(ev.Timestamp, sh.zone)
		if reason != "" {
			return fmt.Sprintf("timestamp column %q (%s.columns.timestamp) %s", sh.timestampCol, sh.field, reason)
		}
		if ok {
			msg.Time = t
		}
	}
	if sh.partCol != "" {
		p, ok, reason := partition(ev.Partition)
		if reason != "" {
			return fmt.Sprintf("partition column %q (%s.columns.partition) %s", sh.partCol, sh.field, reason)
		}
		msg.Partition, msg.HasPartition = p, ok
	}
	for i, name := range sh.extraHeader {
		var f binlog.Field
		if i < len(ev.Extra) {
			f = ev.Extra[i]
		} else {
			f.Missing = true
		}
		switch {
		case f.Missing:
			return fmt.Sprintf("the table has no column %q (%s.extra_headers); add the column or remove it from the config", sh.extraCols[i], sh.field)
		case f.Null:
			continue // no header, as for a NULL headers column
		}
		// The column wins over a headers-JSON entry of its name: RocketMQ would keep only the
		// first of the two, and a Kafka consumer would see both.
		msg.Headers = slices.DeleteFunc(msg.Headers, func(h sink.Header) bool { return h.Key == name })
		msg.Headers = append(msg.Headers, sink.Header{Key: name, Value: nonNil(f.Bytes)})
	}
	return ""
}

// recordTime reads a timestamp column: epoch milliseconds (an integer column, or a TIMESTAMP
// as the binlog reader gives it) or a DATETIME's text in zone. NULL keeps the commit time
// (ok false). reason says what is wrong, or "".
func recordTime(f binlog.Field, zone *time.Location) (t time.Time, ok bool, reason string) {
	switch {
	case f.Missing:
		return t, false, "is not in the table"
	case f.Null:
		return t, false, ""
	}
	s := string(f.Bytes)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return t, false, fmt.Sprintf("is %d: a negative epoch-millis time", ms)
		}
		t = time.UnixMilli(ms).UTC()
	} else if t, err = time.ParseInLocation("2006-01-02 15:04:05.999999", s, zone); err != nil {
		return time.Time{}, false, fmt.Sprintf("is %q: not a DATETIME, TIMESTAMP or epoch-millis value from 1970 on", s)
	}
	// The instant, not the wall clock, must be in range: a DATETIME early on 1970-01-01 east of
	// UTC is a negative Kafka timestamp, which brokers refuse. A record time of 0 is what
	// kafka-go reads as "unset" and replaces by its clock, and RFC 3339 (ce_time) ends at 9999.
	t = t.UTC()
	if t.UnixMilli() < 1 || t.Year() > 9999 {
		return time.Time{}, false, fmt.Sprintf("is %q (%s): outside the record times Kafka carries, after 1970-01-01T00:00:00Z up to the end of 9999", s, t.Format(time.RFC3339Nano))
	}
	return t, true, ""
}

// partition reads a partition column: NULL leaves the choice to the key (ok false).
func partition(f binlog.Field) (p int32, ok bool, reason string) {
	switch {
	case f.Missing:
		return 0, false, "is not in the table"
	case f.Null:
		return 0, false, ""
	}
	n, err := strconv.ParseInt(string(f.Bytes), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0, false, fmt.Sprintf("is %q: not a partition number (0 up to the topic's partition count - 1)", f.Bytes)
	}
	return int32(n), true, ""
}

// apply sets the CloudEvents binary-mode headers on msg (after its time is final) and drops
// the row's own headers of the same names. It returns why the row is poison, or "".
func (ce *ceRoute) apply(rt *route, ev *binlog.Event, msg *sink.Message) string {
	if len(ev.EventID.Bytes) == 0 {
		return fmt.Sprintf("routes[%d] has format cloudevents, whose ce_id (the event id) must not be empty, and the row's event id is empty", rt.index)
	}
	typ := text(ev.EventType)
	if typ == "" {
		if typ = ce.typ; typ == "" {
			return fmt.Sprintf("routes[%d] has format cloudevents, which needs a ce_type, and the row has no event_type; set routes[%d].cloudevents.type for such rows", rt.index, rt.index)
		}
	}
	source := ce.source
	if source == "" {
		source = "/outboxd/" + ev.Schema + "." + ev.Table
	}
	msg.Headers = slices.DeleteFunc(msg.Headers, func(h sink.Header) bool { return config.CloudEventsHeader(h.Key) })
	msg.Headers = append(msg.Headers,
		sink.Header{Key: HeaderCESpecVersion, Value: []byte(CESpecVersion)},
		sink.Header{Key: HeaderCEID, Value: nonNil(ev.EventID.Bytes)},
		sink.Header{Key: HeaderCEType, Value: []byte(typ)},
		sink.Header{Key: HeaderCESource, Value: []byte(source)},
		sink.Header{Key: HeaderCETime, Value: msg.Time.UTC().AppendFormat(nil, time.RFC3339Nano)},
		sink.Header{Key: HeaderContentType, Value: ce.contentType},
	)
	return ""
}
