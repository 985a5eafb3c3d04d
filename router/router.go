// Package router turns outbox rows read from the binlog into fully encoded sink messages: it
// picks the sink and topic by the configured routes and builds the final key, value and headers,
// so that a retry resends bytes and never encodes again.
package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/sink"
)

// Header names set by outboxd. A row's own headers column cannot override them: an entry with
// one of these names is dropped, so consumers can trust them.
const (
	HeaderEventID          = "event_id"
	HeaderEventType        = "event_type"
	HeaderTable            = "outbox_table"
	HeaderGTID             = "outbox_gtid"
	HeaderDeadLetterReason = "outbox_dead_letter_reason"
	// HeaderDeadLetterCode is a dead letter's short stable reason code, for consumers to branch
	// on: the reason label of outboxd_dead_letters_total (no_route, malformed, rejected,
	// topic_missing). HeaderDeadLetterReason is the same in words, with the row's details.
	HeaderDeadLetterCode = "outbox_dead_letter_code"
	HeaderOriginalTopic  = "outbox_original_topic"
)

// ReasonNoRoute is PoisonError.Reason when no route matches a row.
const ReasonNoRoute = "no route matches"

// reserved is config.ReservedHeader, which lists the names above (TestReservedHeaders).
func reserved(key string) bool { return config.ReservedHeader(key) }

// PoisonError reports a row that can never be delivered as it is: retrying cannot help, so the
// pipeline either stops (on_poison: stop) or diverts the row with DeadLetter.
type PoisonError struct {
	// Reason says what is wrong with the row or its routing.
	Reason string
	// Schema and Table name the outbox table; ID is the row's id column, if it has one.
	Schema, Table, ID string
	// EventID and Topic are the row's columns as text ("" when NULL or absent).
	EventID, Topic string
	// GTID is the row's transaction.
	GTID string
}

func (e *PoisonError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "poison outbox row in %s.%s (", e.Schema, e.Table)
	if e.ID != "" {
		fmt.Fprintf(&b, "id %s, ", e.ID)
	}
	fmt.Fprintf(&b, "event_id %q, topic %q, gtid %s): %s; ", e.EventID, e.Topic, e.GTID, e.Reason)
	if e.Reason == ReasonNoRoute {
		b.WriteString("add a route matching it, or set on_poison: dead_letter")
	} else {
		b.WriteString("the row is committed and cannot be changed: set on_poison: dead_letter to divert such rows, and fix the code that writes them")
	}
	return b.String()
}

// Router maps outbox rows to sinks and messages. It is immutable after New and safe for
// concurrent use.
type Router struct {
	routes     []route
	tables     map[string]config.Columns
	deadLetter *config.DeadLetter
	// tableGlobs: some route matches on the table, so the router names each event's table.
	tableGlobs bool
	// shapes are the tables with message-shape options (shape.go).
	shapes map[tableKey]*tableShape
	// patterns are the tables[].pattern entries; nil without any (pattern.go).
	patterns *patterns
	// lastBase is the table and GTID header values of the last routed event: the events of one
	// transaction and table share them instead of allocating them each.
	lastBase atomic.Pointer[baseValues]
}

// baseValues are the outbox_table and outbox_gtid header values of txn's events of one table.
// Header values are never written after a message is built, so messages share them.
type baseValues struct {
	txn           *binlog.Txn
	gtid          string
	schema, table string
	tableV, gtidV []byte
}

type route struct {
	index                int
	tableGlob, topicGlob string
	sink                 string
	topic                config.Template
	tag                  config.Template
	hasTag               bool
	ce                   *ceRoute // format: cloudevents; nil for raw
}

// New compiles cfg's routes. cfg should have passed config.Validate; New still rejects what it
// cannot compile (bad glob or template, unknown sink) instead of failing later. It does not keep
// cfg. On error the Router is nil.
func New(cfg *config.Config) (*Router, error) {
	if cfg == nil {
		return nil, errors.New("router: no configuration")
	}
	r := &Router{tables: make(map[string]config.Columns, len(cfg.Tables))}
	for i, t := range cfg.Tables {
		if t.IsPattern() {
			r.addPattern(i, t)
			continue
		}
		r.tables[t.Table] = t.Columns
		if sh := newShape(i, t); sh != nil {
			if r.shapes == nil {
				r.shapes = make(map[tableKey]*tableShape)
			}
			r.shapes[tableKey{t.Schema(), t.Name()}] = sh
		}
	}
	for i, rc := range cfg.Routes {
		rt := route{index: i, tableGlob: rc.Match.Table, topicGlob: rc.Match.Topic, sink: rc.Sink, ce: newCERoute(rc)}
		r.tableGlobs = r.tableGlobs || rc.Match.Table != ""
		for _, g := range []string{rc.Match.Table, rc.Match.Topic} {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("router: routes[%d]: glob %q: %w", i, g, err)
			}
		}
		if _, ok := cfg.Sinks[rc.Sink]; !ok {
			return nil, fmt.Errorf("router: routes[%d].sink %q is not a configured sink", i, rc.Sink)
		}
		topic := rc.Topic
		if topic == "" {
			topic = config.DefaultRouteTopic
		}
		var err error
		if rt.topic, err = config.ParseTemplate(topic); err != nil {
			return nil, fmt.Errorf("router: routes[%d].topic: %w", i, err)
		}
		if rc.Tag != "" {
			if rt.tag, err = config.ParseTemplate(rc.Tag); err != nil {
				return nil, fmt.Errorf("router: routes[%d].tag: %w", i, err)
			}
			rt.hasTag = true
		}
		r.routes = append(r.routes, rt)
	}
	if dl := cfg.DeadLetter; dl != nil {
		if _, ok := cfg.Sinks[dl.Sink]; !ok {
			return nil, fmt.Errorf("router: dead_letter.sink %q is not a configured sink", dl.Sink)
		}
		if dl.Topic == "" {
			return nil, errors.New("router: dead_letter.topic is empty")
		}
		copied := *dl
		r.deadLetter = &copied
	}
	return r, nil
}

// Route maps one outbox row to its destination: the sink name and the fully encoded message.
// It never does I/O and is safe for concurrent use. It returns a *PoisonError when the row can
// never be delivered (no route matches, a required column is absent or NULL, the headers column
// is not a JSON object, the topic renders empty); then sinkName and msg are empty.
//
// The message's Key and Value share memory with ev's bytes: ev must not be modified afterwards.
// A NULL payload is poison rather than an empty value, because an empty or null Kafka value
// means "delete" to compacted topics and RocketMQ refuses empty bodies; the table's
// empty_payload: tombstone makes it (and an empty one) a nil Value instead (shape.go).
func (r *Router) Route(txn *binlog.Txn, ev *binlog.Event) (sinkName string, msg *sink.Message, err error) {
	sinkName, _, msg, err = r.RouteIndexed(txn, ev)
	return sinkName, msg, err
}

// RouteIndexed is Route that also returns the index of the matching route in the config
// (routes[index]), for metrics; index is -1 when err is not nil.
func (r *Router) RouteIndexed(txn *binlog.Txn, ev *binlog.Event) (sinkName string, index int, msg *sink.Message, err error) {
	if txn == nil || ev == nil {
		return "", -1, nil, errors.New("router: Route called without a transaction or event")
	}
	if reason := r.malformed(ev); reason != "" {
		return "", -1, nil, poison(txn, ev, reason)
	}
	// The row's text is viewed, not copied: three allocations an event fewer. A Field's bytes
	// are never written (binlog.Field), and the views live no longer than the message, whose
	// Value aliases the same event buffer. Rendered topics and tags are new strings, so no view
	// becomes a map key downstream (topic caches, per-topic series) that would pin the buffer.
	vars := config.TemplateVars{
		Topic:     view(ev.Topic.Bytes),
		Schema:    ev.Schema,
		Table:     ev.Table,
		EventType: view(textBytes(ev.EventType)),
	}
	rt := r.matchEvent(ev, vars.Topic)
	if rt == nil {
		return "", -1, nil, poison(txn, ev, ReasonNoRoute)
	}
	dest := rt.topic.Render(vars)
	if dest == "" {
		return "", -1, nil, poison(txn, ev, fmt.Sprintf("routes[%d] renders topic template %q to an empty topic", rt.index, rt.topic))
	}
	// The message and its base headers in one allocation (routed is per event).
	out := &routed{}
	headers, err := appendRowHeaders(r.appendBaseOf(out.headers[:0], txn, ev), ev.Headers)
	if err != nil {
		return "", -1, nil, poison(txn, ev, err.Error())
	}
	tag := vars.EventType
	if rt.hasTag {
		tag = rt.tag.Render(vars)
	}
	out.msg = sink.Message{
		Topic:   dest,
		Key:     key(ev.Key),
		Value:   nonNil(ev.Payload.Bytes),
		Headers: headers,
		Time:    txn.CommitTime,
		EventID: view(ev.EventID.Bytes),
		Tag:     tag,
	}
	if sh := r.shapeOf(ev); sh != nil {
		if reason := sh.apply(ev, &out.msg); reason != "" {
			return "", -1, nil, poison(txn, ev, reason)
		}
	}
	if rt.ce != nil {
		if reason := rt.ce.apply(rt, ev, &out.msg); reason != "" {
			return "", -1, nil, poison(txn, ev, reason)
		}
	}
	return rt.sink, rt.index, &out.msg, nil
}

// routed is a routed message with room for the base headers, allocated as one.
type routed struct {
	msg     sink.Message
	headers [4]sink.Header
}

// DeadLetter builds the dead-letter message for a row that Route or a sink rejected for good
// (on_poison: dead_letter): the row's key, value and headers plus outbox_dead_letter_code (code,
// the caller's stable reason code, "unknown" when empty), outbox_dead_letter_reason (reason's
// text) and outbox_original_topic (the row's topic column), to dead_letter.topic. It
// accepts malformed rows: absent or NULL columns are left out, and a headers column that is not
// a JSON object contributes no headers. It never does I/O and is safe for concurrent use. It
// returns an error only when dead_letter is not configured or txn or ev is nil.
func (r *Router) DeadLetter(txn *binlog.Txn, ev *binlog.Event, code string, reason error) (sinkName string, msg *sink.Message, err error) {
	if r.deadLetter == nil {
		return "", nil, errors.New("router: dead_letter is not configured; set on_poison: dead_letter and dead_letter: {sink, topic}")
	}
	if txn == nil || ev == nil {
		return "", nil, errors.New("router: DeadLetter called without a transaction or event")
	}
	headers := baseHeaders(txn, ev)
	if withRow, err := appendRowHeaders(headers, ev.Headers); err == nil {
		headers = withRow
	}
	why := "unknown"
	if reason != nil {
		why = reason.Error()
	}
	if code == "" {
		code = "unknown"
	}
	headers = append(headers,
		sink.Header{Key: HeaderDeadLetterCode, Value: []byte(code)},
		sink.Header{Key: HeaderDeadLetterReason, Value: []byte(why)},
		sink.Header{Key: HeaderOriginalTopic, Value: []byte(text(ev.Topic))},
	)
	var value []byte
	if present(ev.Payload) {
		value = nonNil(ev.Payload.Bytes)
	}
	return r.deadLetter.Sink, &sink.Message{
		Topic:   r.deadLetter.Topic,
		Key:     key(ev.Key),
		Value:   value,
		Headers: headers,
		Time:    txn.CommitTime,
		EventID: text(ev.EventID),
		Tag:     text(ev.EventType),
	}, nil
}

// malformed returns why ev can never be delivered regardless of routing, or "".
func (r *Router) malformed(ev *binlog.Event) string {
	if wellFormed(ev) {
		return "" // the common case, without building the column names the reasons need
	}
	cols, ok := r.tables[ev.Schema+"."+ev.Table]
	if p := r.patternOf(ev); !ok && p != nil {
		cols, ok = p.cols, true
	}
	if !ok {
		cols = config.Columns{EventID: "event_id", Key: "biz_key", Topic: "topic", Payload: "payload"}
	}
	required := []struct {
		f          binlog.Field
		name, conf string
	}{
		{ev.EventID, cols.EventID, "event_id"},
		{ev.Key, cols.Key, "key"},
		{ev.Topic, cols.Topic, "topic"},
		{ev.Payload, cols.Payload, "payload"},
	}
	for _, c := range required {
		if c.f.Missing {
			return fmt.Sprintf("the table has no column %q (tables[].columns.%s); add the column or name the right one in the config", c.name, c.conf)
		}
	}
	switch {
	case ev.EventID.Null:
		return fmt.Sprintf("event id column %q is NULL", cols.EventID)
	case ev.Topic.Null:
		return fmt.Sprintf("topic column %q is NULL", cols.Topic)
	case len(ev.Topic.Bytes) == 0:
		return fmt.Sprintf("topic column %q is empty", cols.Topic)
	case ev.Payload.Null && !r.tombstoneNull(ev):
		return fmt.Sprintf("payload column %q is NULL (write an empty value explicitly if that is meant, or set empty_payload: tombstone)", cols.Payload)
	}
	return ""
}

// wellFormed reports that malformed would find nothing wrong with ev.
func wellFormed(ev *binlog.Event) bool {
	return !ev.EventID.Missing && !ev.Key.Missing && !ev.Topic.Missing && !ev.Payload.Missing &&
		!ev.EventID.Null && !ev.Topic.Null && len(ev.Topic.Bytes) > 0 && !ev.Payload.Null
}

// matchEvent is match for ev's table, building its "schema.table" name only when some route
// has a table glob to match it against.
func (r *Router) matchEvent(ev *binlog.Event, topic string) *route {
	if !r.tableGlobs {
		return r.match("", topic)
	}
	return r.match(ev.Schema+"."+ev.Table, topic)
}

func (r *Router) match(table, topic string) *route {
	for i := range r.routes {
		rt := &r.routes[i]
		if globMatch(rt.tableGlob, table) && globMatch(rt.topicGlob, topic) {
			return rt
		}
	}
	return nil
}

func globMatch(glob, s string) bool {
	if glob == "" {
		return true
	}
	ok, err := path.Match(glob, s)
	return err == nil && ok
}

// baseHeaders returns the headers outboxd sets itself, in their fixed order.
func baseHeaders(txn *binlog.Txn, ev *binlog.Event) []sink.Header {
	return appendBaseHeaders(make([]sink.Header, 0, 8), txn, ev)
}

// appendBaseHeaders appends baseHeaders to hs; the table and GTID values share one allocation.
func appendBaseHeaders(hs []sink.Header, txn *binlog.Txn, ev *binlog.Event) []sink.Header {
	b := newBaseValues(txn, ev) // stays on the stack: only its values' bytes are allocated
	return appendBase(hs, ev, &b)
}

// appendBaseOf is appendBaseHeaders with the table and GTID header values of the last event
// when it was of the same transaction and table, else new ones, kept for the next event. The
// last event of txn keeps none (no later event shares them), so a 1-row transaction's event
// allocates only the values, as appendBaseHeaders does.
func (r *Router) appendBaseOf(hs []sink.Header, txn *binlog.Txn, ev *binlog.Event) []sink.Header {
	last := r.lastBase.Load()
	if last != nil && last.txn == txn && last.gtid == txn.GTID && last.schema == ev.Schema && last.table == ev.Table {
		return appendBase(hs, ev, last)
	}
	if n := len(txn.Events); n > 0 && ev == &txn.Events[n-1] {
		if last != nil {
			r.lastBase.Store(nil) // pin no earlier transaction
		}
		return appendBaseHeaders(hs, txn, ev)
	}
	b := newBaseValues(txn, ev)
	r.lastBase.Store(&b)
	return appendBase(hs, ev, &b)
}

// newBaseValues builds the table and GTID header values in one allocation.
func newBaseValues(txn *binlog.Txn, ev *binlog.Event) baseValues {
	vals := make([]byte, 0, len(ev.Schema)+1+len(ev.Table)+len(txn.GTID))
	vals = append(append(append(vals, ev.Schema...), '.'), ev.Table...)
	table := vals[:len(vals):len(vals)]
	vals = append(vals, txn.GTID...)
	return baseValues{txn: txn, gtid: txn.GTID, schema: ev.Schema, table: ev.Table, tableV: table, gtidV: vals[len(table):]}
}

// appendBase appends the base headers of ev to hs, with the table and GTID values of b.
func appendBase(hs []sink.Header, ev *binlog.Event, b *baseValues) []sink.Header {
	if present(ev.EventID) {
		hs = append(hs, sink.Header{Key: HeaderEventID, Value: nonNil(ev.EventID.Bytes)})
	}
	if present(ev.EventType) {
		hs = append(hs, sink.Header{Key: HeaderEventType, Value: nonNil(ev.EventType.Bytes)})
	}
	return append(hs,
		sink.Header{Key: HeaderTable, Value: b.tableV},
		sink.Header{Key: HeaderGTID, Value: b.gtidV},
	)
}

// appendRowHeaders appends the entries of the headers column, a JSON object, in the object's own
// order (a map would lose it): strings as their text, other values as compact JSON. Entries with
// a reserved name are dropped. A NULL, absent or blank column adds nothing.
func appendRowHeaders(hs []sink.Header, f binlog.Field) ([]sink.Header, error) {
	if !present(f) || len(bytes.TrimSpace(f.Bytes)) == 0 {
		return hs, nil
	}
	dec := json.NewDecoder(bytes.NewReader(f.Bytes))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("headers column is not valid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("headers column is not a JSON object (it starts with %s)", describeToken(tok))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("headers column is not valid JSON: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errors.New("headers column is not valid JSON: object key is not a string")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("headers column is not valid JSON: value of %q: %w", name, err)
		}
		if reserved(name) {
			continue
		}
		value, err := headerValue(raw)
		if err != nil {
			return nil, fmt.Errorf("headers column: value of %q: %w", name, err)
		}
		hs = append(hs, sink.Header{Key: name, Value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("headers column is not valid JSON: %w", err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("headers column has data after the JSON object: %w", err)
		}
		return nil, fmt.Errorf("headers column has data after the JSON object (%s)", describeToken(tok))
	}
	return hs, nil
}

func headerValue(raw json.RawMessage) ([]byte, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", string(v))
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

func present(f binlog.Field) bool { return !f.Missing && !f.Null }

// text returns the field as a string, "" when NULL or absent.
func text(f binlog.Field) string {
	if !present(f) {
		return ""
	}
	return string(f.Bytes)
}

// textBytes is the field's bytes, nil when NULL or absent (text's bytes).
func textBytes(f binlog.Field) []byte {
	if !present(f) {
		return nil
	}
	return f.Bytes
}

// view is b as a string without a copy; b must never be written afterwards (a Field's bytes
// never are).
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// key returns nil for a NULL or absent key and a non-nil slice otherwise, because Kafka tells a
// null key (spread over partitions) from an empty one (hashed like any other).
func key(f binlog.Field) []byte {
	if !present(f) {
		return nil
	}
	return nonNil(f.Bytes)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func poison(txn *binlog.Txn, ev *binlog.Event, reason string) *PoisonError {
	return &PoisonError{
		Reason:  reason,
		Schema:  ev.Schema,
		Table:   ev.Table,
		ID:      ev.ID,
		EventID: text(ev.EventID),
		Topic:   text(ev.Topic),
		GTID:    txn.GTID,
	}
}
