package importpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Debezium's MySQL (and MariaDB) connector stores its offset in Kafka Connect's offset store
// (the offsets topic, or FileOffsetBackingStore in standalone mode) as a record whose key is
// ["<connector name>",{"server":"<topic.prefix>"}] and whose value is a JSON object with
// file, pos, gtids, row, event, ts_sec, server_id, transaction_id and, while the initial
// snapshot runs, snapshot and snapshot_completed (Debezium MySQL connector documentation,
// "Source metadata" and "Connector offsets"; MySqlOffsetContext in the connector's code).
//
// What gtids means, from MySqlOffsetContext: at a GTID event the connector keeps the set
// without the new transaction as restartGtidSet and the set with it as currentGtidSet; at the
// commit (XID) it moves restartGtidSet to currentGtidSet and zeroes event and row. The offset
// always writes restartGtidSet. So gtids is the executed set through the last transaction the
// connector had emitted in full ("delivered through"), never one it is inside; event and row
// count the events and rows of the next transaction already emitted, which the connector skips
// on restart. outboxd cannot skip part of a transaction: importing gtids resends that
// transaction's rows (duplicates), and loses nothing. pos is restartBinlogPosition: the offset
// after the commit of that last transaction (or the start of the partly emitted one), a
// transaction boundary either way.

// debeziumValue is the offset value's fields outboxd reads.
type debeziumValue struct {
	File              string          `json:"file"`
	Pos               int64           `json:"pos"`
	GTIDs             string          `json:"gtids"`
	Row               int64           `json:"row"`
	Event             int64           `json:"event"`
	Snapshot          json.RawMessage `json:"snapshot"`
	SnapshotCompleted json.RawMessage `json:"snapshot_completed"`
}

// debeziumRecord is one offset record: its key's connector and server, and its value (nil for
// a tombstone, which deletes the offset).
type debeziumRecord struct {
	connector, server string
	value             *debeziumValue
}

// ReadDebezium reads Debezium offset records from r and returns the position of connector
// ("" when r holds one connector's records only). r holds JSON values one after the other: a
// key (the array) followed by its value (object, or null for a tombstone), any number of
// times, as a dump of the offsets topic prints them (kcat -f '%k %s\n'); or a value alone; or
// the answer of Kafka Connect's GET /connectors/<name>/offsets. The
// last record of the connector wins, as in the topic. It does not block beyond reading r.
func ReadDebezium(r io.Reader, connector string) (Position, error) {
	recs, err := decodeDebezium(r)
	if err != nil {
		return Position{}, err
	}
	return pickDebezium(recs, connector)
}

// KeyValue is one record of Kafka Connect's offsets topic; Value is nil for a tombstone.
type KeyValue struct {
	Key, Value []byte
}

// ReadDebeziumTopic returns the position of connector from the records of Kafka Connect's
// offsets topic (offset.storage.topic), in the topic's order: the connector's last record wins.
// Records of other connectors, and of connectors that are not Debezium's, are skipped. Pure.
func ReadDebeziumTopic(recs []KeyValue, connector string) (Position, error) {
	if connector == "" {
		return Position{}, errors.New("debezium: reading the offsets topic needs the connector's name (--connector)")
	}
	var mine []debeziumRecord
	for _, kv := range recs {
		var key []json.RawMessage
		var name string
		if json.Unmarshal(kv.Key, &key) != nil || len(key) != 2 || json.Unmarshal(key[0], &name) != nil || name != connector {
			continue
		}
		var part struct {
			Server string `json:"server"`
		}
		if json.Unmarshal(key[1], &part) != nil {
			return Position{}, fmt.Errorf("debezium: key %s is not [\"<connector>\",{\"server\":\"<topic.prefix>\"}]", kv.Key)
		}
		rec := debeziumRecord{connector: name, server: part.Server}
		if kv.Value != nil && string(bytes.TrimSpace(kv.Value)) != "null" {
			v, err := decodeDebeziumValue(kv.Value)
			if err != nil {
				return Position{}, err
			}
			rec.value = v
		}
		mine = append(mine, rec)
	}
	if len(mine) == 0 {
		return Position{}, fmt.Errorf("debezium: the offsets topic has no record of connector %q", connector)
	}
	return pickDebezium(mine, connector)
}

// pickDebezium maps the last record of connector in recs ("": the only connector's).
func pickDebezium(recs []debeziumRecord, connector string) (Position, error) {
	var mine []debeziumRecord
	names := map[string]bool{}
	for _, rec := range recs {
		names[rec.connector] = true
		if connector == "" || rec.connector == connector {
			mine = append(mine, rec)
		}
	}
	if len(mine) == 0 {
		return Position{}, fmt.Errorf("debezium: no offset record of connector %q (connectors found: %s)", connector, list(names))
	}
	if connector == "" && len(names) > 1 {
		return Position{}, fmt.Errorf("debezium: offsets of several connectors (%s): pass --connector NAME", list(names))
	}
	rec := mine[len(mine)-1]
	where := "of connector " + rec.connector
	if rec.connector == "" {
		where = "(offset value)"
	}
	if rec.server != "" {
		where += " (topic.prefix " + rec.server + ")"
	}
	if rec.value == nil {
		return Position{}, fmt.Errorf("debezium: the last offset record %s is a tombstone: the offset was deleted and there is no position to import", where)
	}
	v := rec.value
	if isTrue(v.Snapshot) && !isTrue(v.SnapshotCompleted) {
		return Position{}, fmt.Errorf("debezium: the offset %s was saved during the connector's initial snapshot: the rows the snapshot had not read yet are in no binlog position. "+
			"Let the snapshot finish and the connector stream, then import; or start outboxd with outboxd backfill, which sends the rows already in the table", where)
	}
	p := Position{Tool: Debezium, Where: where, GTIDSet: strings.TrimSpace(v.GTIDs), File: v.File, Pos: v.Pos, Boundary: v.File != ""}
	if v.Event > 0 || v.Row > 0 {
		p.Partial = fmt.Sprintf("the connector had emitted %d event(s) and %d row(s) of the transaction after %s: outboxd sends that transaction's outbox rows again", v.Event, v.Row, orNone(p.GTIDSet))
	}
	return p, nil
}

func decodeDebezium(r io.Reader) ([]debeziumRecord, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var recs []debeziumRecord
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("debezium: the offset file is not a sequence of JSON key and value records: %w", err)
		}
		raw = bytes.TrimSpace(raw)
		switch raw[0] {
		case '{':
			if rest, ok, err := decodeConnectREST(raw); ok || err != nil {
				return rest, err
			}
			if len(recs) > 0 || dec.More() {
				return nil, errors.New("debezium: an offset value without its key among other records: give each value after its key [\"<connector>\",{\"server\":\"<topic.prefix>\"}]")
			}
			v, err := decodeDebeziumValue(raw)
			if err != nil {
				return nil, err
			}
			return []debeziumRecord{{value: v}}, nil
		case '[':
			var key []json.RawMessage
			if err := json.Unmarshal(raw, &key); err != nil || len(key) != 2 {
				return nil, fmt.Errorf("debezium: key %s is not [\"<connector>\",{\"server\":\"<topic.prefix>\"}]", raw)
			}
			var rec debeziumRecord
			var part struct {
				Server string `json:"server"`
			}
			if json.Unmarshal(key[0], &rec.connector) != nil || json.Unmarshal(key[1], &part) != nil {
				return nil, fmt.Errorf("debezium: key %s is not [\"<connector>\",{\"server\":\"<topic.prefix>\"}]", raw)
			}
			rec.server = part.Server
			var val json.RawMessage
			if err := dec.Decode(&val); err != nil {
				return nil, fmt.Errorf("debezium: key %s has no value after it: %w", raw, err)
			}
			if string(bytes.TrimSpace(val)) != "null" {
				v, err := decodeDebeziumValue(val)
				if err != nil {
					return nil, err
				}
				rec.value = v
			}
			recs = append(recs, rec)
		default:
			return nil, fmt.Errorf("debezium: %s is neither an offset key (array) nor a value (object)", raw)
		}
	}
	if len(recs) == 0 {
		return nil, errors.New("debezium: the offset file holds no record")
	}
	return recs, nil
}

// decodeConnectREST reads the answer of Kafka Connect's GET /connectors/<name>/offsets
// (KIP-875, Kafka 3.5+, in distributed and standalone mode alike):
// {"offsets":[{"partition":{"server":"<topic.prefix>"},"offset":{...}}]}. The connector is the
// one the URL named, so the records carry no connector name. ok is false for any other object.
func decodeConnectREST(raw []byte) (recs []debeziumRecord, ok bool, err error) {
	var rest struct {
		Offsets *[]struct {
			Partition struct {
				Server string `json:"server"`
			} `json:"partition"`
			Offset json.RawMessage `json:"offset"`
		} `json:"offsets"`
	}
	if json.Unmarshal(raw, &rest) != nil || rest.Offsets == nil {
		return nil, false, nil
	}
	for _, o := range *rest.Offsets {
		rec := debeziumRecord{server: o.Partition.Server}
		if s := string(bytes.TrimSpace(o.Offset)); s != "" && s != "null" {
			if rec.value, err = decodeDebeziumValue(o.Offset); err != nil {
				return nil, true, err
			}
		}
		recs = append(recs, rec)
	}
	if len(recs) != 1 {
		return nil, true, fmt.Errorf("debezium: the connector's offsets (GET /connectors/<name>/offsets) hold %d partitions, want the one of a MySQL or MariaDB connector", len(recs))
	}
	return recs, true, nil
}

func decodeDebeziumValue(raw []byte) (*debeziumValue, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v debeziumValue
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("debezium: offset value %s: %w", raw, err)
	}
	if v.File == "" && v.GTIDs == "" {
		return nil, fmt.Errorf("debezium: offset value %s has neither file nor gtids: not a MySQL or MariaDB connector's offset", raw)
	}
	return &v, nil
}

// isTrue reports whether a JSON flag is true; Debezium writes snapshot as a boolean, some
// versions as the string "true" ("last" marks the snapshot's last record, which completes it).
func isTrue(raw json.RawMessage) bool {
	return strings.Trim(string(raw), `" `) == "true"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func list(m map[string]bool) string {
	var names []string
	for n := range m {
		if n == "" {
			n = "(no key)"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
