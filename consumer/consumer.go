// Package consumer is the consuming side of outboxd's at-least-once delivery: a small library
// that makes a consumer effectively once against its own MySQL or MariaDB database. It is not
// part of the daemon (outboxd never imports it).
//
// outboxd may deliver an event more than once (a resend after a crash, a broker retry, a replay).
// Handle turns that into exactly one effect by doing, for each message, in this order:
//
//  1. check: insert the handler's name and the event_id into a dedup table, in a new
//     transaction; a row that is already there means this handler handled (or rejected) the
//     event before, and the message is acked without running the work;
//  2. the work and the mark in one transaction: the caller's function runs in that same
//     transaction, and the transaction commits the business writes and the dedup row together;
//  3. only then ack: Handle returns nil, and the caller commits the offset (Kafka) or returns
//     ConsumeSuccess (RocketMQ).
//
// Marking before the work, in a transaction of its own, is the classic mistake: a failure after
// the mark makes every redelivery look like a duplicate, and the event is silently lost. Acking
// before the commit loses it too, on a crash in between.
//
// A function error wrapped with Permanent rolls the work back, records the event as REJECTED
// and copies it into a quarantine table, and acks, so a bad event is neither retried forever nor
// lost from sight. Any other error rolls everything back and asks for redelivery.
//
// The adapters in consumer/kafkago and consumer/rmqpush drive Handle from a kafka-go Reader and
// a rocketmq-client-go push consumer.
package consumer

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
)

// Status is what the dedup table records for an event.
type Status string

const (
	// StatusProcessed means the function ran and its writes committed with the mark.
	StatusProcessed Status = "PROCESSED"
	// StatusRejected means the function returned a permanent error: nothing of its work is
	// kept, and the event is in the quarantine table.
	StatusRejected Status = "REJECTED"
)

// Outcome is what Handle did with a message it returns nil for; the message is to be acked.
type Outcome int

const (
	// Processed: the function ran and committed with the mark.
	Processed Outcome = iota + 1
	// Duplicate: the event was marked before; the function did not run.
	Duplicate
	// Rejected: the function returned a permanent error, or the message has no usable event_id
	// (none, or longer than MaxEventIDBytes); the event is in the quarantine table (and, with
	// a usable event_id, marked REJECTED).
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Header is one message header (Kafka record header, RocketMQ user property, decoded).
type Header struct {
	Key   string
	Value []byte
}

// Message is what Handle needs of a delivered message. The adapters fill it from the broker's
// message.
type Message struct {
	// EventID is outboxd's event_id: the dedup key. Empty, or longer than MaxEventIDBytes,
	// means the message cannot be deduplicated; Handle quarantines it.
	EventID string
	// MsgID is the broker's id of this delivery ("topic/partition@offset" for Kafka, the
	// message id for RocketMQ), recorded beside the mark for tracing a duplicate to its source.
	MsgID   string
	Topic   string
	Key     []byte
	Payload []byte
	Headers []Header
}

// Header returns the value of the first header named name, and whether there is one.
func (m Message) Header(name string) ([]byte, bool) {
	for _, h := range m.Headers {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

// Func is the caller's work for one message. It must do its database writes through tx (that
// is what makes them atomic with the mark) and should have no other side effect that a retry
// cannot repeat: after a transient error or a crash it runs again. It must not commit or roll
// back tx. Return Permanent(err) for an event that can never succeed.
type Func func(ctx context.Context, tx *sql.Tx, msg Message) error

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: Handle records the event as REJECTED, quarantines it and
// acks. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ErrNoEventID is the reason recorded in the quarantine table for a message without an
// event_id, ErrLongEventID for one longer than MaxEventIDBytes (the dedup key's width).
var (
	ErrNoEventID   = errors.New("message has no event_id: it cannot be deduplicated")
	ErrLongEventID = fmt.Errorf("event_id longer than %d bytes: it cannot be deduplicated", MaxEventIDBytes)
)

// MaxEventIDBytes is the longest event_id the dedup table holds (VARBINARY(255)).
const MaxEventIDBytes = 255

// Options are the settings of a Kit.
type Options struct {
	// Handler names the work this Kit does ("benefits", "audit"): required. It is part of the
	// dedup key, so that handlers sharing a dedup table each handle every event once (without
	// it one would take the other's marks for duplicates, and skip the event). Keep it stable:
	// a new name handles every redelivered event again. 1 to 64 of letters, digits, _ . : -.
	Handler string
	// DedupTable and QuarantineTable name the tables, optionally "schema.table"; the defaults
	// are DefaultDedupTable and DefaultQuarantineTable.
	DedupTable, QuarantineTable string
	// Isolation is the transaction's isolation level; the default is the server's
	// (REPEATABLE READ on InnoDB); New refuses a level MySQL has not. The dedup insert checks
	// the primary key with a locking read whatever the level.
	Isolation sql.IsolationLevel
}

// Default table names (see DDL).
const (
	DefaultDedupTable      = "consumed_event"
	DefaultQuarantineTable = "quarantined_event"
)

// Kit handles messages against one database. It is safe for concurrent use: each Handle has
// its own transaction.
type Kit struct {
	db                *sql.DB
	dedup, quarantine string // quoted identifiers
	dedupName         string // as configured, "table" or "schema.table"
	quarantineName    string // as configured
	handler           string
	iso               sql.IsolationLevel
}

var handlerRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

var identRE = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}(\.[A-Za-z0-9_$]{1,64})?$`)

// New returns a Kit for db, which must reach a MySQL or MariaDB server through
// github.com/go-sql-driver/mysql (Handle reads its error numbers). It does not touch the
// database; CreateTables creates the tables.
func New(db *sql.DB, o Options) (*Kit, error) {
	if db == nil {
		return nil, errors.New("consumer: nil *sql.DB")
	}
	if !handlerRE.MatchString(o.Handler) {
		return nil, fmt.Errorf("consumer: Options.Handler %q: name the handler (1 to 64 of letters, digits, _ . : -), such as \"benefits\": "+
			"it is part of the dedup key, so that handlers sharing a dedup table do not skip each other's events as duplicates", o.Handler)
	}
	if o.DedupTable == "" {
		o.DedupTable = DefaultDedupTable
	}
	if o.QuarantineTable == "" {
		o.QuarantineTable = DefaultQuarantineTable
	}
	for field, name := range map[string]string{"DedupTable": o.DedupTable, "QuarantineTable": o.QuarantineTable} {
		if !identRE.MatchString(name) {
			return nil, fmt.Errorf("consumer: Options.%s %q: want table or schema.table of letters, digits, _ and $", field, name)
		}
	}
	switch o.Isolation {
	case sql.LevelDefault, sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
	default: // go-sql-driver refuses every BeginTx with it: each Handle would fail
		return nil, fmt.Errorf("consumer: Options.Isolation %v: MySQL and MariaDB have READ UNCOMMITTED, READ COMMITTED, REPEATABLE READ and SERIALIZABLE", o.Isolation)
	}
	if o.DedupTable == o.QuarantineTable {
		return nil, fmt.Errorf("consumer: Options.DedupTable and QuarantineTable are both %q", o.DedupTable)
	}
	return &Kit{db: db, dedup: quote(o.DedupTable), quarantine: quote(o.QuarantineTable), dedupName: o.DedupTable, quarantineName: o.QuarantineTable, handler: o.Handler, iso: o.Isolation}, nil
}

func quote(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = "`" + p + "`"
	}
	return strings.Join(parts, ".")
}

// Handle runs fn for msg at most once per event_id and handler, in one transaction with the mark, and
// tells the caller whether to ack. It blocks until the transaction ended.
//
// nil error: ack the message (commit its offset). The outcome says why: Processed (fn's writes
// and the mark committed together), Duplicate (marked before, PROCESSED or REJECTED: a
// rejected event stays rejected until its mark is deleted; fn did not run), Rejected (fn
// returned Permanent; its writes were rolled back, the mark says REJECTED and the event is in
// the quarantine table; or msg has no EventID and was quarantined without a mark).
//
// Non-nil error: do not ack; the message must be delivered again. Nothing of fn's work and no
// mark is kept, except when the error came from COMMIT itself, whose outcome the client cannot
// know: then the redelivery finds the mark if the commit did succeed, and is acked as a
// Duplicate.
//
// Concurrent deliveries of one event_id (two consumers during a rebalance, a RocketMQ retry
// overtaking a slow first attempt): the second dedup insert waits for the first transaction's
// row lock. When the first commits, the second gets the duplicate-key error and acks; when it
// rolls back, the second goes on and runs fn. So fn never commits twice for an event. The wait
// lasts at most innodb_lock_wait_timeout (default 50 s); a timeout (1205), or the deadlock
// InnoDB reports (1213) when three or more deliveries wait on the same row and the first rolls
// back, come back as an error: the message is redelivered and then found marked, or processed.
// The dedup insert is the transaction's first statement, so it holds no other lock while it
// waits; lock order inside fn is the caller's concern.
func (k *Kit) Handle(ctx context.Context, msg Message, fn Func) (Outcome, error) {
	if msg.EventID == "" || len(msg.EventID) > MaxEventIDBytes {
		why := ErrNoEventID
		if msg.EventID != "" {
			why = ErrLongEventID
		}
		if err := k.quarantineOnly(ctx, msg, why); err != nil {
			return 0, err
		}
		return Rejected, nil
	}
	tx, err := k.db.BeginTx(ctx, &sql.TxOptions{Isolation: k.iso})
	if err != nil {
		return 0, fmt.Errorf("event %s: begin: %w", msg.EventID, err)
	}
	defer tx.Rollback() // a no-op after Commit; on a panic in fn it undoes the work and the mark

	// 1. Check: the mark's insert is the check, so that no other delivery can slip in between
	// a SELECT and the INSERT.
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+k.dedup+" (handler, event_id, status, msg_id, handled_at) VALUES (?, ?, ?, ?, NOW(6))",
		k.handler, msg.EventID, StatusProcessed, storable(msg.MsgID, maxMsgIDBytes)); err != nil {
		if isDuplicateKey(err) {
			return Duplicate, nil
		}
		if mysqlErrno(err) == erBadField {
			return 0, fmt.Errorf("event %s: insert into %s: %w", msg.EventID, k.dedup, k.oldTable(err))
		}
		return 0, fmt.Errorf("event %s: insert into %s: %w", msg.EventID, k.dedup, err)
	}
	// A savepoint after the mark, so that a permanent error can undo fn's writes and keep the
	// row lock on the mark while it turns it into REJECTED.
	if _, err := tx.ExecContext(ctx, "SAVEPOINT outbox_consumer_work"); err != nil {
		return 0, fmt.Errorf("event %s: savepoint: %w", msg.EventID, err)
	}

	// 2. The work, in the mark's transaction.
	if ferr := fn(ctx, tx, msg); ferr != nil {
		if !IsPermanent(ferr) {
			return 0, fmt.Errorf("event %s: %w", msg.EventID, ferr)
		}
		if err := k.reject(ctx, tx, msg, ferr); err != nil {
			return 0, fmt.Errorf("event %s: record the permanent error %q: %w", msg.EventID, ferr.Error(), err)
		}
		if err := tx.Commit(); err != nil {
			return 0, fmt.Errorf("event %s: commit REJECTED: %w", msg.EventID, err)
		}
		return Rejected, nil
	}

	// 3. The work and the mark commit together; only after this may the caller ack.
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("event %s: commit: %w", msg.EventID, err)
	}
	return Processed, nil
}

// reject undoes fn's writes (back to the savepoint after the mark), marks the event REJECTED
// and quarantines it, in tx. A deadlock inside fn has already rolled the whole transaction back
// on the server; the savepoint is then gone and reject fails, so the event is redelivered.
func (k *Kit) reject(ctx context.Context, tx *sql.Tx, msg Message, why error) error {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT outbox_consumer_work"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+k.dedup+" SET status = ? WHERE handler = ? AND event_id = ?", StatusRejected, k.handler, msg.EventID); err != nil {
		return err
	}
	return k.insertQuarantine(ctx, tx, msg, why)
}

// quarantineOnly records a message that cannot be marked (no event_id) in a transaction of its
// own. Its redeliveries are quarantined again: there is no key to know them by.
func (k *Kit) quarantineOnly(ctx context.Context, msg Message, why error) error {
	tx, err := k.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("message %s: begin: %w", msg.MsgID, err)
	}
	defer tx.Rollback()
	if err := k.insertQuarantine(ctx, tx, msg, why); err != nil {
		return fmt.Errorf("message %s: quarantine: %w", msg.MsgID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("message %s: commit quarantine: %w", msg.MsgID, err)
	}
	return nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insertQuarantine copies msg and why into the quarantine table, with k's handler. A table of an
// older kit, without the handler column (CreateTables not run since the upgrade), still takes
// the row without it: quarantining must not fail, or a permanent error becomes a message retried
// forever. The failed statement alone is rolled back, so the retry stays in db's transaction.
func (k *Kit) insertQuarantine(ctx context.Context, db execer, msg Message, why error) error {
	args := []any{msg.EventID, storable(msg.MsgID, maxMsgIDBytes), storable(msg.Topic, maxMsgIDBytes), msg.Key, msg.Payload,
		HeadersJSON(msg.Headers), storable(why.Error(), maxErrorBytes)}
	const cols, vals = "event_id, msg_id, topic, msg_key, payload, headers, error, quarantined_at", "?, ?, ?, ?, ?, ?, ?, NOW(6)"
	_, err := db.ExecContext(ctx, "INSERT INTO "+k.quarantine+" ("+cols+", handler) VALUES ("+vals+", ?)", append(args, k.handler)...)
	if mysqlErrno(err) == erBadField {
		_, err = db.ExecContext(ctx, "INSERT INTO "+k.quarantine+" ("+cols+") VALUES ("+vals+")", args...)
	}
	return err
}

// Widths of the text columns (schema.sql): msg_id and topic VARCHAR(512), error TEXT.
const (
	maxMsgIDBytes = 512
	maxErrorBytes = 65535
)

// storable returns s as a utf8mb4 column of limit bytes takes it in strict mode: invalid UTF-8
// replaced by U+FFFD, cut at a character boundary. Pure.
func storable(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// HeadersJSON renders headers as a JSON object for the quarantine table: text values as they
// are, other values (not UTF-8, or starting with "base64:") as "base64:" and their standard
// base64, outboxd's convention for RocketMQ properties. A repeated name keeps its last value.
// Pure.
func HeadersJSON(hs []Header) string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		if utf8.Valid(h.Value) && !strings.HasPrefix(string(h.Value), base64Prefix) {
			m[h.Key] = string(h.Value)
		} else {
			m[h.Key] = base64Prefix + base64.StdEncoding.EncodeToString(h.Value)
		}
	}
	b, _ := json.Marshal(m) // cannot fail: a map of strings
	return string(b)
}

const base64Prefix = "base64:"

// MySQL error numbers Handle tells apart.
const (
	erBadField    = 1054 // unknown column: a table of the kit before handler
	erDupEntry    = 1062
	erLockTimeout = 1205
	erDeadlock    = 1213
)

func isDuplicateKey(err error) bool { return mysqlErrno(err) == erDupEntry }

// IsLockConflict reports whether err is a lock wait timeout or a deadlock, which the server
// resolved by rolling the statement or the transaction back: a redelivery is the cure.
func IsLockConflict(err error) bool {
	n := mysqlErrno(err)
	return n == erLockTimeout || n == erDeadlock
}

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Mark is one row of the dedup table.
type Mark struct {
	EventID   string
	Status    Status
	MsgID     string
	HandledAt time.Time
}

// Marks returns the handler's rows of the dedup table ordered by event_id, for reconciliation against
// the business tables (the check that each PROCESSED mark has its result). It blocks on the
// query and is safe for concurrent use.
func (k *Kit) Marks(ctx context.Context) ([]Mark, error) {
	rows, err := k.db.QueryContext(ctx, "SELECT event_id, status, msg_id, CAST(UNIX_TIMESTAMP(handled_at) * 1000000 AS SIGNED) FROM "+k.dedup+" WHERE handler = ? ORDER BY event_id", k.handler)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Mark
	for rows.Next() {
		var m Mark
		var msgID sql.NullString
		var micros int64 // not a DATETIME scan, which needs parseTime=true in the DSN
		if err := rows.Scan(&m.EventID, &m.Status, &msgID, &micros); err != nil {
			return nil, err
		}
		m.MsgID, m.HandledAt = msgID.String, time.UnixMicro(micros)
		out = append(out, m)
	}
	return out, rows.Err()
}
