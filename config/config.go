// Package config loads and validates outboxd's YAML configuration.
//
// Decoding is strict: an unknown key anywhere is an error, and ${VAR} / ${VAR:-default} are
// expanded in scalar values only after YAML parsing, so a secret holding '#' or ': ' is taken
// literally instead of being read as YAML. Validate reports every problem at once, each naming the
// field (source.server_id, routes[1].sink, sinks.main.brokers) and what is allowed.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outboxd/gtid"
)

// sinks.<name>.type values.
const (
	SinkKafka    = "kafka"
	SinkRocketMQ = "rocketmq"
)

// sinks.<name>.compression values (kafka).
const (
	CompressionNone   = "none"
	CompressionGzip   = "gzip"
	CompressionSnappy = "snappy"
	CompressionLZ4    = "lz4"
	CompressionZstd   = "zstd"
)

// on_poison values.
const (
	OnPoisonStop       = "stop"
	OnPoisonDeadLetter = "dead_letter"
)

// source.start values (besides a GTID set).
const (
	StartLatest   = "latest"
	StartEarliest = "earliest"
)

// source.flavor values.
const (
	FlavorMySQL   = gtid.MySQL
	FlavorMariaDB = gtid.MariaDB
)

// log.level values.
const (
	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"
)

// log.format values.
const (
	LogJSON    = "json"
	LogConsole = "console"
)

// Defaults applied by ApplyDefaults to fields left empty.
const (
	DefaultStart              = StartLatest
	DefaultKafkaClientID      = "outboxd"
	DefaultKafkaTimeout       = 10 * time.Second
	DefaultKafkaMaxMessage    = 1048576
	DefaultKafkaCompression   = CompressionNone
	DefaultRocketMQGroup      = "outboxd-producer"
	DefaultRocketMQTimeout    = 3 * time.Second
	DefaultRouteTopic         = "{topic}"
	DefaultOnPoison           = OnPoisonStop
	DefaultRetryInitial       = 100 * time.Millisecond
	DefaultRetryMax           = 10 * time.Second
	DefaultCheckpointPath     = "./data/checkpoint.json"
	DefaultCheckpointInterval = time.Second
	DefaultLogLevel           = LogInfo
	DefaultLogFormat          = LogJSON
	DefaultAdminListen        = "127.0.0.1:9120"
	DefaultHeartbeatInterval  = 5 * time.Second
	DefaultSourceReadTimeout  = 10 * time.Second
	DefaultMinBinlogRetention = 24 * time.Hour
)

// SourceHeartbeatPeriod is the replication heartbeat period outboxd asks the source for (the
// binlog reader's HeartbeatPeriod). source.read_timeout must exceed it, or an idle stream
// times out between two heartbeats.
const SourceHeartbeatPeriod = time.Second

// Config is the whole configuration file. Log it with String or Redacted, which hide secrets.
type Config struct {
	// Source is the server whose binlog outboxd reads (required).
	Source Source `yaml:"source"`
	// Tables are the outbox tables (at least one). Only INSERTs into them become messages;
	// everything else in the binlog only moves the position forward.
	Tables []Table `yaml:"tables"`
	// Sinks are the broker clusters by name (at least one); routes and dead_letter name them.
	Sinks map[string]Sink `yaml:"sinks"`
	// Routes say which sink and topic each row goes to (at least one). They are tried in
	// order and the first match wins; a row no route matches is poison.
	Routes []Route `yaml:"routes"`
	// OnPoison is what happens to a row that can never be delivered (no route matches, a
	// required column is NULL, its headers are not a JSON object, the broker rejects it for
	// good): OnPoisonStop exits with an error naming the row and what to change, after
	// delivering and checkpointing the transactions before it; OnPoisonDeadLetter sends it to
	// dead_letter with the headers outbox_dead_letter_code, outbox_dead_letter_reason and
	// outbox_original_topic, and goes on.
	OnPoison string `yaml:"on_poison"`
	// DeadLetter is where poison rows go; required with on_poison: dead_letter.
	DeadLetter *DeadLetter `yaml:"dead_letter"`
	// Retry is the backoff between resends of a failed send.
	Retry Retry `yaml:"retry"`
	// Delivery is the guarantee: DeliveryAtLeastOnce (the default: after a crash or restart
	// the events sent after the last checkpoint are sent again) or DeliveryExactlyOnce (Kafka
	// only: the events and the checkpoint covering them are written in one Kafka transaction,
	// so a read_committed consumer sees each event once). exactly_once needs checkpoint.store:
	// kafka, and every route and the dead-letter sink on Kafka sinks of checkpoint.sink's
	// cluster; see docs/concepts/exactly-once.md.
	Delivery string `yaml:"delivery"`
	// Checkpoint is where the position of the last transaction every broker acknowledged is
	// saved, and how often.
	Checkpoint Checkpoint `yaml:"checkpoint"`
	// Transactions sizes the Kafka transactions of delivery: exactly_once (only for it). A
	// transaction commits at the first source-transaction boundary once the reader has nothing
	// waiting, or max_events, max_bytes or checkpoint.interval is reached; a source transaction
	// is never split, however large.
	Transactions Transactions `yaml:"transactions"`
	// Pipeline bounds what is read but not yet acknowledged.
	Pipeline Pipeline `yaml:"pipeline"`
	// Log is the log level and line format (written to standard error).
	Log Log `yaml:"log"`
	// Admin is the operator HTTP server.
	Admin Admin `yaml:"admin"`
	// HA is leader election between instances of one pipeline.
	HA HA `yaml:"ha"`
	// Reconcile, when set, runs reconciliation periodically in the daemon, by the leader;
	// left out (the default), it is off.
	Reconcile *Reconcile `yaml:"reconcile"`
	// Cleanup, when set, deletes delivered rows from every outbox table (a table's own cleanup
	// block overrides it field by field); left out (the default), nothing is deleted.
	Cleanup *Cleanup `yaml:"cleanup"`

	// lines maps a field path ("routes[1].sink") to its line in the file, so Validate can point
	// at the line. Empty for a Config built in code.
	lines map[string]int
}

// Source is the MySQL/MariaDB server whose binlog outboxd reads.
type Source struct {
	// Flavor is the server's kind, which decides the GTID notation (required).
	Flavor gtid.Flavor `yaml:"flavor"`
	// Addr is the server's host:port (this or Addrs is required). With Addrs it is the first
	// of them.
	Addr string `yaml:"addr"`
	// Addrs are candidate servers of one replication topology (a primary and its replicas, in
	// the order to try): after a lost connection outboxd streams from the first that is
	// reachable, passes the checks and has every transaction of its checkpoint. Exclusive with
	// Addr in the file.
	//
	// In code, after ApplyDefaults, it holds Addr when only Addr was given.
	Addrs []string `yaml:"addrs"`
	// OnMissingGTIDs is what happens when no candidate has every transaction of the checkpoint
	// (an asynchronous failover discarded some outboxd already delivered): OnMissingStop
	// (default) stops with the GTIDs; OnMissingContinue logs and counts them, and resumes from
	// the newest transaction both histories share. With the mysql store outboxd does the latter
	// under either (its row replicates with the data, so it matches the new primary).
	OnMissingGTIDs string `yaml:"on_missing_gtids"`
	// User is the account outboxd connects as (required). It needs REPLICATION SLAVE and
	// REPLICATION CLIENT (MariaDB 10.5+: BINLOG MONITOR too) and SELECT on the outbox tables.
	User string `yaml:"user"`
	// Password is the account's password, usually ${VAR} from the environment; it is never
	// written to logs. Exclusive with PasswordFile.
	Password string `yaml:"password"`
	// PasswordFile names a file holding the password (one trailing newline is trimmed); it is
	// read at load and is exclusive with Password.
	PasswordFile string `yaml:"password_file"`
	// TLS says whether and how the SQL and binlog connections use TLS; left out, they do not.
	TLS *SourceTLS `yaml:"tls"`
	// ServerID is outboxd's replica id, 1 or more (required); it must differ from every other
	// replica of the server.
	ServerID uint32 `yaml:"server_id"`
	// Start is where to begin when there is no checkpoint yet: StartLatest, the server's
	// current position (only rows committed from now on); StartEarliest, the oldest binlog
	// still on the server; or a GTID set in the server's notation ("0-1-1000" on MariaDB,
	// "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-1000" on MySQL). Ignored once a checkpoint exists.
	Start string `yaml:"start"`
	// ReadTimeout bounds the wait for any packet of the binlog stream (events or heartbeats), so
	// a dead connection is noticed; default DefaultSourceReadTimeout. It must exceed the period
	// between the server's heartbeats: SourceHeartbeatPeriod for a server that honours the
	// period asked for, 30s for Dolt, which ignores it.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// Heartbeat, when set, makes outboxd upsert one row of a table on an interval, so a quiet
	// database still produces binlog transactions that move the checkpoint.
	Heartbeat *Heartbeat `yaml:"heartbeat"`
	// SkipChecks names start-up checks whose problems outboxd run logs as warnings instead of
	// refusing to start: for a check that is wrong about a given server. Names: flavor,
	// log_bin, binlog_format, binlog_row_image, binlog_row_metadata, server_id, gtid_mode,
	// enforce_gtid_consistency, gtid_strict_mode, binlog_retention, replication_slave,
	// replication_client, table_select, table_exists, table_columns, checkpoint_table,
	// checkpoint_grants, checkpoint_writer, cleanup_writer, cleanup_grants, cleanup_table,
	// cleanup_hold.
	//
	// In code, the names are preflight.CheckNames; internal/docgen's test keeps this list
	// complete.
	SkipChecks []string `yaml:"skip_checks"`
	// AllowMinimalRowMetadata accepts binlog_row_metadata other than FULL, with its risk of
	// fields mapped to the wrong columns after an ALTER TABLE: without FULL, column names come
	// from information_schema, which describes the table as it is now, not as the row was
	// written.
	AllowMinimalRowMetadata bool `yaml:"allow_minimal_row_metadata"`
	// MinBinlogRetention is the shortest binlog retention check and run accept without a
	// warning (check binlog_retention); default DefaultMinBinlogRetention. outboxd can be
	// stopped or stuck this long before the server purges binlogs it has not read.
	MinBinlogRetention time.Duration `yaml:"min_binlog_retention"`
}

// Heartbeat is the optional heartbeat row: outboxd writes (id = server_id, ts = NOW(6)) into
// Table every Interval on its own connection. The table must not be an outbox table.
type Heartbeat struct {
	// Table is "schema.table", with columns id (primary key) and ts, such as CREATE TABLE
	// outboxd.heartbeat (id INT UNSIGNED PRIMARY KEY, ts DATETIME(6) NOT NULL); the user
	// needs SELECT, INSERT and UPDATE on it.
	Table string `yaml:"table"`
	// Interval is how often the row is written.
	Interval time.Duration `yaml:"interval"`
}

// Admin is the HTTP server for /metrics, /healthz, /readyz and /status.
type Admin struct {
	// Listen is host:port. Omitted: DefaultAdminListen (loopback only). "" or "off": no server.
	// An explicitly set address that cannot be bound stops outboxd at start; the default one
	// only logs an error. The server serves no secrets.
	Listen *string `yaml:"listen"`
}

// Addr returns the address to listen on, or "" when the admin server is disabled. Pure.
func (a Admin) Addr() string {
	if a.Listen == nil {
		return DefaultAdminListen
	}
	if v := strings.TrimSpace(*a.Listen); v != "off" {
		return v
	}
	return ""
}

// Table is one outbox table and the names of its columns.
type Table struct {
	// Table is "schema.table"; each table at most once. Exactly one of table and pattern is set.
	Table string `yaml:"table"`
	// Pattern names every table whose schema and name match it: two globs,
	// "schema_glob.table_glob", such as "shop_*.outbox_event" (* and ? never cross the dot;
	// the whole name must match; case-sensitive). Each matching table is an outbox table with
	// this entry's columns and options: checked at start like a listed one, and picked up at its
	// first row when one is created while outboxd runs. A listed table wins over a pattern.
	// Not with cleanup, reconcile or source.allow_minimal_row_metadata.
	Pattern string `yaml:"pattern"`
	// Columns names the table's columns; each one left out takes its default name.
	Columns Columns `yaml:"columns"`
	// Cleanup overrides the global cleanup block for this table, field by field; enabled:
	// false turns cleanup off for this table.
	Cleanup *Cleanup `yaml:"cleanup"`
	// TimestampZone is the IANA time zone a DATETIME columns.timestamp is read in; empty means
	// UTC. (A TIMESTAMP or epoch-millis column is absolute and ignores it.)
	TimestampZone string `yaml:"timestamp_zone"`
	// ExtraHeaders places columns as message headers, {column: header_name}; a NULL value adds
	// no header, and outboxd's own header names are refused.
	ExtraHeaders map[string]string `yaml:"extra_headers"`
	// EmptyPayload is what an empty (or NULL) payload becomes: EmptyPayloadSend (the default:
	// an empty message), EmptyPayloadTombstone (Kafka only: a null value with the key; a row
	// without a key is poison) or EmptyPayloadPoison.
	EmptyPayload string `yaml:"empty_payload"`
	// OnUpdate is what an UPDATE of an outbox row does (it is never sent): OnUpdateIgnore
	// (the default), OnUpdateWarn (log it and count it in outboxd_outbox_updates_total) or
	// OnUpdateStop (exit naming the row).
	OnUpdate string `yaml:"on_update"`

	// Origin is set on the entries Expand made from a pattern entry; nil for an entry of the
	// file. Not read from YAML.
	Origin *TableOrigin `yaml:"-"`
}

// Columns names the outbox table's columns; ApplyDefaults fills each empty one with its key.
//
// event_id, key, topic and payload must exist in the table; event_type and headers may be
// absent.
type Columns struct {
	// EventID is the row's unique id, sent as the header event_id (consumers deduplicate on it).
	EventID string `yaml:"event_id"`
	// Key is the message key, which orders and partitions; NULL means no key.
	Key string `yaml:"key"`
	// Topic is the row's logical topic, matched by routes[].match.topic and used as {topic}.
	Topic string `yaml:"topic"`
	// Payload is the message value, sent byte for byte.
	Payload string `yaml:"payload"`
	// EventType is optional: the header event_type, the template placeholder {event_type}
	// and the default RocketMQ tag.
	EventType string `yaml:"event_type"`
	// Headers is optional: a JSON object of extra message headers.
	Headers string `yaml:"headers"`
	// CreatedAt is the row's insert time, a DATETIME or TIMESTAMP column; empty (the default)
	// means the table has none. reconcile needs it: its window selects rows by it.
	CreatedAt string `yaml:"created_at"`
	// Timestamp is the Kafka record time: a DATETIME, TIMESTAMP or epoch-millis integer
	// column; empty (the default) means the commit time. Kafka only.
	Timestamp string `yaml:"timestamp"`
	// Partition is an integer column picking the Kafka partition; empty (the default) means
	// by key. Kafka only.
	Partition string `yaml:"partition"`
}

// Sink is one broker cluster. Kafka fields and RocketMQ fields are exclusive by Type: a field's
// only tag names the type it belongs to, so that an unknown key is answered with the keys of
// the sink's own type.
type Sink struct {
	// Type is the broker kind (required); the other keys allowed depend on it.
	Type string `yaml:"type"`

	// Kafka.

	// Brokers are the Kafka bootstrap brokers, host:port, at least one (kafka only).
	Brokers []string `yaml:"brokers" only:"kafka"`
	// ClientID is the Kafka client id the brokers see (kafka only).
	ClientID string `yaml:"client_id" only:"kafka"`
	// Timeout bounds each send to the brokers: nothing of it is written later than this after
	// it began, however long its batches waited for a request (kafka only).
	Timeout time.Duration `yaml:"timeout" only:"kafka"`
	// MaxMessageBytes is the largest message sent; a larger one is poison (kafka only). Keep
	// it at most the topic's max.message.bytes.
	MaxMessageBytes int `yaml:"max_message_bytes" only:"kafka"`
	// Compression is the codec of the record batches sent: none, gzip, snappy, lz4 or zstd
	// (kafka only). The broker stores batches as sent unless the topic's compression.type
	// says otherwise; consumers decompress. max_message_bytes bounds the uncompressed size.
	Compression string `yaml:"compression" only:"kafka"`
	// TLS, when set, encrypts broker connections and verifies the brokers' certificates
	// (kafka only).
	TLS *SinkTLS `yaml:"tls" only:"kafka"`
	// SASL, when set, authenticates to the brokers (kafka only).
	SASL *SASL `yaml:"sasl" only:"kafka"`
	// Idempotent makes the producer idempotent, default true: every record batch carries a
	// producer id and sequence numbers, so a batch resent after its answer was lost is stored
	// once, in order. Set false only where the cluster refuses it: ACLs without the
	// IDEMPOTENT_WRITE permission on brokers before Kafka 2.8, which check reports (kafka only).
	// delivery: exactly_once needs it true.
	Idempotent *bool `yaml:"idempotent" only:"kafka"`

	// RocketMQ.

	// Nameservers are the RocketMQ NameServers, host:port, at least one (rocketmq only).
	Nameservers []string `yaml:"nameservers" only:"rocketmq"`
	// Group is the producer group (rocketmq only).
	Group string `yaml:"group" only:"rocketmq"`
	// Namespace is the RocketMQ namespace; empty means none (rocketmq only).
	Namespace string `yaml:"namespace" only:"rocketmq"`
	// AccessKey is the ACL access key, usually ${VAR}; AccessKey and SecretKey come as a pair
	// or not at all (rocketmq only).
	AccessKey string `yaml:"access_key" only:"rocketmq"`
	// SecretKey is the ACL secret key, usually ${VAR}; never written to logs (rocketmq only).
	SecretKey string `yaml:"secret_key" only:"rocketmq"`
	// AccessKeyFile names a file holding the access key, read at load; exclusive with
	// AccessKey (rocketmq only).
	AccessKeyFile string `yaml:"access_key_file" only:"rocketmq"`
	// SecretKeyFile names a file holding the secret key, read at load; exclusive with
	// SecretKey (rocketmq only).
	SecretKeyFile string `yaml:"secret_key_file" only:"rocketmq"`
	// SendTimeout bounds each send to the brokers, all of its requests together: nothing of it
	// is written later (rocketmq only). Each queue's messages go in batches of at most 256
	// messages or 1 MiB.
	SendTimeout time.Duration `yaml:"send_timeout" only:"rocketmq"`
}

// Route sends matching rows to a sink. Routes are tried in order; the first match wins.
type Route struct {
	// Name is the route's label in the delivery metrics (the route label of
	// outboxd_events_delivered_total and the per-table series); empty means the route's index
	// as text ("0", "1", ...).
	Name string `yaml:"name"`
	// Match selects the rows the route takes; left out, it takes every row.
	Match Match `yaml:"match"`
	// Sink names the sink the rows go to, a key of sinks (required).
	Sink string `yaml:"sink"`
	// Topic is the destination topic, a template with the placeholders {topic} (the row's
	// topic column), {schema}, {table} and {event_type}.
	Topic string `yaml:"topic"`
	// Tag is the RocketMQ tag, a template like Topic; empty means the row's event_type
	// (rocketmq sinks only).
	Tag string `yaml:"tag"`
	// Format is the envelope: FormatRaw (the default: the payload as it is) or
	// FormatCloudEvents (Kafka only: binary-mode ce_* headers; a row without event_type is
	// poison unless cloudevents.type is set).
	Format string `yaml:"format"`
	// CloudEvents holds the attributes of format: cloudevents; left out, each takes its
	// default.
	CloudEvents *CloudEvents `yaml:"cloudevents"`
}

// Match selects rows by globs in Go's path.Match syntax (*, ?, [a-z]). An empty glob matches
// everything.
type Match struct {
	// Table is matched against "schema.table".
	Table string `yaml:"table"`
	// Topic is matched against the row's topic column.
	Topic string `yaml:"topic"`
}

// DeadLetter is where poison rows go with on_poison: dead_letter.
type DeadLetter struct {
	// Sink names the sink dead letters go to, a key of sinks (required).
	Sink string `yaml:"sink"`
	// Topic is the dead-letter topic, literal (no placeholders; required).
	Topic string `yaml:"topic"`
}

// DefaultMissingTopicTimeout is how long a row waits for a topic the broker says does not exist
// before it follows on_poison.
const DefaultMissingTopicTimeout = 5 * time.Minute

// Retry bounds the exponential backoff of sink retries. Retries of a retryable error never
// give up, since giving up would lose or reorder messages: the stream stalls instead.
type Retry struct {
	// Initial is the first wait after a failed send, more than 0; each next wait doubles.
	Initial time.Duration `yaml:"initial"`
	// Max is the longest wait between two resends, at least Initial.
	Max time.Duration `yaml:"max"`
	// MissingTopicTimeout bounds the retries of a row whose topic does not exist (Kafka
	// UNKNOWN_TOPIC_OR_PARTITION, a RocketMQ topic without a route): it may be created any
	// moment, but a typo in a topic template never will be. After it the row follows on_poison.
	MissingTopicTimeout time.Duration `yaml:"missing_topic_timeout"`
}

// Checkpoint says where and how often the acknowledged GTID position is saved.
type Checkpoint struct {
	// Store is CheckpointStoreFile (the default: the file at Path), CheckpointStoreMySQL (one
	// row of Table, keyed by Name, on the writable primary at WriterAddr) or
	// CheckpointStoreKafka (records keyed by Name in Topic, written in the Kafka transaction
	// that carries the events they cover; only with delivery: exactly_once).
	Store string `yaml:"store"`
	// Path is the checkpoint file (file store only). Its directory must be writable: the
	// file is replaced atomically and locked while outboxd runs.
	Path string `yaml:"path"`
	// Interval is how often the checkpoint is saved while the position moves. With delivery:
	// exactly_once it is the longest a Kafka transaction stays open (it commits at the first
	// source-transaction boundary after), and must be shorter than transactions.timeout.
	Interval time.Duration `yaml:"interval"`
	// Table is the MySQL store's "schema.table" (mysql store only).
	Table string `yaml:"table"`
	// Name names this pipeline's checkpoint (mysql and kafka stores; required there): the
	// key of its row in Table, or of its records in Topic. With the kafka store the Kafka
	// transactional.id is "outboxd-" + Name, so two outboxd with one name fence each other.
	Name string `yaml:"name"`
	// WriterAddr is host:port of the writable primary the row is written on, with source's
	// user, password and TLS (mysql store; default source.addr). It exists for a binlog source
	// that is a replica: the checkpoint must live where the data is written. With the kafka
	// store it is where the ha leader lock lives and cleanup deletes (default source.addr).
	WriterAddr string `yaml:"writer_addr"`
	// Sink names the Kafka sink whose brokers, tls, sasl, compression, timeout and
	// max_message_bytes the transactional producer uses (kafka store only; required). Every
	// route's sink and the dead-letter sink must be of its cluster.
	Sink string `yaml:"sink"`
	// Topic is the checkpoint topic (kafka store only; required): compacted, one partition;
	// outboxd check creates it so, or verifies an existing one. Use a topic of its own.
	Topic string `yaml:"topic"`
}

// HA is leader election: with Enabled, every outboxd with this config competes for one named
// lock on the writable primary (checkpoint.writer_addr); only the holder reads the binlog and
// sends, the others wait as hot standbys. It needs checkpoint.store: mysql or kafka (with
// kafka, the broker also fences a superseded leader's sends).
type HA struct {
	// Enabled turns leader election on.
	Enabled bool `yaml:"enabled"`
	// LockName is the GET_LOCK name, at most 64 characters; default "outboxd." +
	// checkpoint.name + "." + a short hash of the outbox tables, so that two configs that
	// share a checkpoint.name but relay different tables never form one group.
	LockName string `yaml:"lock_name"`
	// Lease is how long the leader goes on without proving it holds the lock before it fences
	// itself (stops reading and sending, never saves again); default DefaultHALease. The lock
	// connection's wait_timeout is the lease plus the longest sink timeout plus 2s.
	Lease time.Duration `yaml:"lease"`
}

// LockName is the leader lock's name: ha.lock_name, or its default from checkpoint.name and the
// outbox tables (also without ha, for commands that check whether a leader runs). Pure.
func (c *Config) LockName() string {
	if c.HA.LockName != "" {
		return c.HA.LockName
	}
	return DefaultLockName(c.Checkpoint.Name, c.ScopeTables())
}

// ScopeTables are the outbox tables this config relays, schema.table, sorted and without
// duplicates: what its checkpoint covers. A pattern entry is recorded by its pattern text, so a
// checkpoint written under a pattern is trusted by that pattern only, whichever tables match it
// now. Pure.
func (c *Config) ScopeTables() []string {
	out := make([]string, 0, len(c.Tables))
	for _, t := range c.Tables {
		switch {
		case t.Origin != nil:
			// An expanded config covers what its file's pattern covers, whatever matched.
			out = append(out, t.Origin.Pattern)
		case t.Pattern != "":
			out = append(out, t.Pattern)
		default:
			out = append(out, t.Schema()+"."+t.Name())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// DefaultLockName is ha.lock_name's default: "outboxd." + name + "." + a short hash of the
// sorted table list, so that two configs sharing a checkpoint.name but relaying different
// tables never form one HA group without a word (each then finds the row written for the
// other's tables and refuses it). A name too long for GET_LOCK's 64 characters is hashed
// whole. Pure.
func DefaultLockName(name string, tables []string) string {
	t := slices.Clone(tables)
	slices.Sort(t)
	t = slices.Compact(t)
	sum := sha256.Sum256([]byte(strings.Join(t, "\n")))
	n := "outboxd." + name + "." + hex.EncodeToString(sum[:4])
	if len(n) <= 64 {
		return n
	}
	all := sha256.Sum256([]byte(name + "\x00" + strings.Join(t, "\n")))
	return "outboxd." + hex.EncodeToString(all[:20])
}

// source.on_missing_gtids values.
const (
	OnMissingStop     = "stop"
	OnMissingContinue = "continue"
)

// DefaultHALease is ha.lease's default.
const DefaultHALease = 5 * time.Second

// KafkaIdempotent reports whether the Kafka sink produces idempotently (idempotent, default
// true). Pure.
func (s Sink) KafkaIdempotent() bool { return s.Idempotent == nil || *s.Idempotent }

// LongestSend is the longest a single send request of any configured sink can take: kafka
// timeout, rocketmq send_timeout. The HA lock's server-side idle timeout must exceed the lease
// by this much. Pure; call after ApplyDefaults.
func (c *Config) LongestSend() time.Duration {
	var d time.Duration
	for _, s := range c.Sinks {
		d = max(d, s.Timeout, s.SendTimeout)
	}
	return d
}

// checkpoint.store values.
const (
	CheckpointStoreFile  = "file"
	CheckpointStoreMySQL = "mysql"
	CheckpointStoreKafka = "kafka"
	// DefaultCheckpointTable is the MySQL store's default table.
	DefaultCheckpointTable = "outboxd.checkpoint"
)

// MySQL reports whether the checkpoint lives in a MySQL table. Pure.
func (c Checkpoint) MySQL() bool { return c.Store == CheckpointStoreMySQL }

// Kafka reports whether the checkpoint lives in a Kafka topic (delivery: exactly_once). Pure.
func (c Checkpoint) Kafka() bool { return c.Store == CheckpointStoreKafka }

// Where names the checkpoint for messages: the file's path, table[name] at the writer, or the
// topic and key on the sink. Pure.
func (c Checkpoint) Where() string {
	switch {
	case c.MySQL():
		return fmt.Sprintf("%s row name=%q on %s", c.Table, c.Name, c.WriterAddr)
	case c.Kafka():
		return fmt.Sprintf("kafka topic %s key %s on sink %s", c.Topic, c.Name, c.Sink)
	}
	return c.Path
}

// Pipeline bounds what is read from the binlog but not yet acknowledged by the brokers: the
// memory outboxd holds, and, when full, the backpressure that pauses binlog reading. Zero
// values take the defaults.
type Pipeline struct {
	// MaxInflightEvents bounds the events read but not yet acknowledged.
	MaxInflightEvents int `yaml:"max_inflight_events"`
	// MaxInflightBytes bounds the message bytes read but not yet acknowledged; the process
	// holds about 2 to 3 times as much memory for them.
	MaxInflightBytes int `yaml:"max_inflight_bytes"`
}

// Defaults of the pipeline section.
const (
	DefaultMaxInflightEvents = 20_000
	DefaultMaxInflightBytes  = 16 << 20
)

// Log configures the log, written to standard error.
type Log struct {
	// Level is the lowest level logged.
	Level string `yaml:"level"`
	// Format is LogJSON (one JSON object per line) or LogConsole (for a person at a terminal).
	Format string `yaml:"format"`
}

// Schema returns the part of Table before the dot. Pure; safe for concurrent use.
func (t Table) Schema() string {
	s, _ := splitTable(t.Table)
	return s
}

// Name returns the part of Table after the dot. Pure; safe for concurrent use.
func (t Table) Name() string {
	_, n := splitTable(t.Table)
	return n
}

func splitTable(s string) (schema, name string) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok {
		return "", s
	}
	return schema, name
}

// Load reads and parses the file at path; see Parse. It blocks on file I/O only. On error the
// returned Config is nil and the error names the file and every bad field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes data strictly, expands ${VAR}, ${VAR:-default} and $$ in scalar values from the
// process environment, reads the secrets named by *_file fields and the CA files named by tls
// sections, applies defaults and validates. It does no I/O besides reading the environment and
// those files, and is safe for concurrent use. On error the returned Config is nil.
func Parse(data []byte) (*Config, error) {
	return parseFiles(data, os.LookupEnv, readLimitedFile)
}

// parse is Parse with its environment injected and without file access: a *_file or ca_file
// field is an error, so tests and the fuzzer never read the machine's files.
func parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	return parseFiles(data, lookup, func(name string) ([]byte, error) {
		return nil, fmt.Errorf("open %s: file access disabled", name)
	})
}

func parseFiles(data []byte, lookup func(string) (string, bool), readFile func(string) ([]byte, error)) (*Config, error) {
	return parseWith(data, lookup, readFile, false)
}

// parseWith is parseFiles; noSecrets leaves the secrets out (see LoadWithoutSecrets).
func parseWith(data []byte, lookup func(string) (string, bool), readFile func(string) ([]byte, error), noSecrets bool) (*Config, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document; keep only one")
	}

	w := walker{lookup: lookup, lines: map[string]int{}, noSecrets: noSecrets}
	w.walk(&root, configType, "")
	c := &Config{}
	if root.Kind != 0 {
		if err := root.Decode(c); err != nil && len(w.errs) == 0 {
			// The walk already checked every value against its field's type; this is a backstop.
			return nil, fmt.Errorf("decode: %w", err)
		}
	}
	c.lines = w.lines
	c.ApplyDefaults()
	// Secrets from files first, so Validate sees the values (access_key and secret_key come as
	// a pair whichever way each is given).
	if noSecrets {
		readFile = readNoSecretFile
	}
	fileErrs := c.resolveFiles(readFile, noSecrets)
	err := c.Validate()
	if len(fileErrs) > 0 {
		// One flat join, so callers and notUnder see every FieldError at the same level.
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			fileErrs = append(fileErrs, joined.Unwrap()...)
		}
		err = errors.Join(fileErrs...)
	}
	if len(w.errs) > 0 {
		// Report the rest of the file's problems too, so one run shows everything to fix, but
		// not the ones that only follow from a field already reported (a server_id that is not
		// a number is also "missing").
		return nil, errors.Join(append(w.errs, notUnder(err, w.errs)...)...)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// notUnder returns the problems joined in err whose field is neither one of the fields of
// reported nor inside one.
func notUnder(err error, reported []error) []error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var out []error
	for _, e := range joined.Unwrap() {
		fe, ok := e.(*FieldError)
		if !ok || !coveredBy(fe.Field, reported) {
			out = append(out, e)
		}
	}
	return out
}

func coveredBy(field string, reported []error) bool {
	for _, r := range reported {
		fe, ok := r.(*FieldError)
		if !ok {
			continue
		}
		rf := fe.Field
		if rf == "" || field == rf || strings.HasPrefix(field, rf+".") || strings.HasPrefix(field, rf+"[") {
			return true
		}
	}
	return false
}

// ApplyDefaults fills empty optional fields with their defaults. Sink defaults depend on the
// sink's type, so a sink of unknown type gets none. Idempotent; not safe for concurrent use with
// readers of c.
func (c *Config) ApplyDefaults() {
	if c.Source.Start == "" {
		c.Source.Start = DefaultStart
	}
	setDefaultDur(&c.Source.ReadTimeout, DefaultSourceReadTimeout)
	setDefaultDur(&c.Source.MinBinlogRetention, DefaultMinBinlogRetention)
	switch {
	case len(c.Source.Addrs) == 0 && c.Source.Addr != "":
		c.Source.Addrs = []string{c.Source.Addr}
	case len(c.Source.Addrs) > 0 && c.Source.Addr == "":
		c.Source.Addr = c.Source.Addrs[0]
	}
	setDefault(&c.Source.OnMissingGTIDs, OnMissingStop)
	if c.Pipeline.MaxInflightEvents == 0 {
		c.Pipeline.MaxInflightEvents = DefaultMaxInflightEvents
	}
	if c.Pipeline.MaxInflightBytes == 0 {
		c.Pipeline.MaxInflightBytes = DefaultMaxInflightBytes
	}
	for i := range c.Tables {
		col := &c.Tables[i].Columns
		setDefault(&col.EventID, "event_id")
		setDefault(&col.Key, "biz_key")
		setDefault(&col.Topic, "topic")
		setDefault(&col.Payload, "payload")
		setDefault(&col.EventType, "event_type")
		setDefault(&col.Headers, "headers")
	}
	for name, s := range c.Sinks {
		switch s.Type {
		case SinkKafka:
			setDefault(&s.ClientID, DefaultKafkaClientID)
			setDefaultDur(&s.Timeout, DefaultKafkaTimeout)
			if s.MaxMessageBytes == 0 {
				s.MaxMessageBytes = DefaultKafkaMaxMessage
			}
			setDefault(&s.Compression, DefaultKafkaCompression)
		case SinkRocketMQ:
			setDefault(&s.Group, DefaultRocketMQGroup)
			setDefaultDur(&s.SendTimeout, DefaultRocketMQTimeout)
		}
		c.Sinks[name] = s
	}
	for i := range c.Routes {
		setDefault(&c.Routes[i].Topic, DefaultRouteTopic)
	}
	setDefault(&c.OnPoison, DefaultOnPoison)
	setDefaultDur(&c.Retry.Initial, DefaultRetryInitial)
	setDefaultDur(&c.Retry.Max, DefaultRetryMax)
	setDefaultDur(&c.Retry.MissingTopicTimeout, DefaultMissingTopicTimeout)
	setDefault(&c.Delivery, DeliveryAtLeastOnce)
	switch {
	case c.Checkpoint.MySQL():
		setDefault(&c.Checkpoint.Table, DefaultCheckpointTable)
	case c.Checkpoint.Kafka():
	default:
		setDefault(&c.Checkpoint.Path, DefaultCheckpointPath)
	}
	if (c.Checkpoint.MySQL() || c.Checkpoint.Kafka()) && len(c.Source.Addrs) <= 1 {
		// With several candidates the writer must be named: it is the primary, wherever that
		// is after a failover (validateCheckpoint says so).
		setDefault(&c.Checkpoint.WriterAddr, c.Source.Addr)
	}
	setDefaultDur(&c.Checkpoint.Interval, DefaultCheckpointInterval)
	if c.ExactlyOnce() {
		c.Transactions.applyDefaults()
	}
	if c.HA.Enabled {
		setDefaultDur(&c.HA.Lease, DefaultHALease)
		if c.Checkpoint.Name != "" {
			setDefault(&c.HA.LockName, DefaultLockName(c.Checkpoint.Name, c.ScopeTables()))
		}
	}
	setDefault(&c.Log.Level, DefaultLogLevel)
	setDefault(&c.Log.Format, DefaultLogFormat)
	if hb := c.Source.Heartbeat; hb != nil {
		setDefaultDur(&hb.Interval, DefaultHeartbeatInterval)
	}
	c.Reconcile.applyDefaults()
}

func setDefault(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setDefaultDur(p *time.Duration, v time.Duration) {
	if *p == 0 {
		*p = v
	}
}

// TableByName returns the configured table "schema.table", if any: a listed entry, or the
// pattern entry matching it. Safe for concurrent use with other readers of c.
func (c *Config) TableByName(schemaTable string) (Table, bool) {
	schema, name := splitTable(schemaTable)
	t, _, ok := c.TableFor(schema, name)
	return t, ok
}
