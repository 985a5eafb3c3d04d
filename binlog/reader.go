package binlog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
)

// Config configures a Reader.
type Config struct {
	Flavor   gtid.Flavor
	Addr     string // host:port
	User     string // needs REPLICATION SLAVE (and REPLICATION CLIENT / BINLOG MONITOR)
	Password string
	// TLS, when set, encrypts the binlog dump connection; nil connects in plain text.
	TLS *tls.Config
	// ServerID identifies this replica to the source; it must be non-zero and unique among the
	// source's replicas.
	ServerID uint32

	Tables []TableSpec
	// Patterns make every matching table an outbox table, checked by Admit (nil: unchecked)
	// at its first row in the stream; see AssemblerConfig.
	Patterns []TablePattern
	Admit    TableAdmitter
	Columns  ColumnResolver // optional; needed when the server writes binlog_row_metadata=MINIMAL
	Logger   zerolog.Logger
	// CheckpointTable is the mysql store's table, whose transactions are marked
	// Txn.OnlyCheckpoint and not counted as transactions read by the lag gauges.
	CheckpointTable TableRef

	// HeartbeatPeriod is how often an idle source sends a heartbeat. Default 5s.
	HeartbeatPeriod time.Duration
	// ReadTimeout bounds the wait for any packet (events or heartbeats) so a dead connection is
	// noticed. Default 3×HeartbeatPeriod; it must exceed HeartbeatPeriod.
	ReadTimeout time.Duration
	// Layouts, when set, is told of every transaction with Txn.Layouts before the transaction
	// is sent on.
	Layouts LayoutRecorder
	// Metrics receives events and bytes read, heartbeats, the connection state and the commit
	// time of each transaction read; nil records nothing.
	Metrics *metrics.Metrics
}

const (
	defaultHeartbeat = 5 * time.Second
	// connCollation replaces go-mysql's handshake collation (id 255, utf8mb4_0900_ai_ci), which
	// MariaDB does not know and answers by falling back to latin1.
	connCollation = "utf8mb4_general_ci"
)

// Sentinel errors that callers branch on (errors.Is).
var (
	// ErrGTIDNotOnServer: the start position is not in the server's binlogs (purged, or from
	// another server). Starting needs an operator decision.
	ErrGTIDNotOnServer = errors.New("start GTID position is not available on the server")
	// ErrAccessDenied: the server refused the replication connection.
	ErrAccessDenied = errors.New("replication access denied")
	// ErrDisconnected: the connection failed or was lost (server down or restarting, network).
	// Streaming again from the last acknowledged position may succeed.
	ErrDisconnected = errors.New("binlog connection lost")
	// ErrServerIDInUse: the server dropped this stream because another replica connected with
	// the same server_id (MariaDB ERROR 4052, MySQL ERROR 1236 "A slave with the same
	// server_uuid/server_id"). It comes wrapped with ErrDisconnected: once is what a restart
	// after a crash looks like from the stale side, repeated drops mean a real duplicate.
	ErrServerIDInUse = errors.New("another replica uses the same server_id")
)

// erSlaveSameID is MariaDB's ER_SLAVE_SAME_ID (4052), sent to the older of two dump
// connections with one server_id when the server kills it for the newer one.
const erSlaveSameID = 4052

// disconnected marks err as ErrDisconnected without changing its message.
type disconnected struct{ error }

func (d disconnected) Unwrap() []error { return []error{d.error, ErrDisconnected} }

// MarkDisconnected marks err as ErrDisconnected without changing its message: for a failure
// of a hook (TableAdmitter) that a new stream from the acknowledged position may get past. Pure.
func MarkDisconnected(err error) error { return disconnected{err} }

// connErr marks a stream error that is not one of the operator-decision sentinels as a lost
// connection.
func connErr(err error) error {
	if errors.Is(err, ErrGTIDNotOnServer) || errors.Is(err, ErrAccessDenied) {
		return err
	}
	return disconnected{err}
}

// LayoutRecorder learns the outbox tables' column layouts after a DDL statement in the binlog
// (Txn.Layouts, with the transaction's end position File and Pos), in binlog order, so that a
// checkpoint covering the statement records them. LayoutChanged must not block for long: the
// stream waits for it; it must not modify t.
type LayoutRecorder interface {
	LayoutChanged(t *Txn)
}

// Reader streams committed transactions from a server's binlog.
type Reader struct {
	cfg  Config
	host string
	port uint16
	// onUpdate is each table's TableSpec.OnUpdate (update.go).
	onUpdate map[tableKey]string
}

// NewReader validates cfg and returns a Reader. It does not connect. Every invalid field is
// named in the returned error.
func NewReader(cfg Config) (*Reader, error) {
	var errs []error
	if cfg.Flavor != gtid.MySQL && cfg.Flavor != gtid.MariaDB {
		errs = append(errs, fmt.Errorf("flavor: %q is not %q or %q", cfg.Flavor, gtid.MySQL, gtid.MariaDB))
	}
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	var port uint64
	if err == nil {
		port, err = strconv.ParseUint(portStr, 10, 16)
	}
	if err != nil || host == "" || port == 0 {
		errs = append(errs, fmt.Errorf("addr: %q is not host:port", cfg.Addr))
	}
	if cfg.User == "" {
		errs = append(errs, errors.New("user: must be set"))
	}
	if cfg.ServerID == 0 {
		errs = append(errs, errors.New("server_id: must be non-zero and unique among the source's replicas"))
	}
	if len(cfg.Tables) == 0 && len(cfg.Patterns) == 0 {
		errs = append(errs, errors.New("tables: at least one outbox table is required"))
	}
	for i, t := range cfg.Tables {
		if t.Schema == "" || t.Table == "" {
			errs = append(errs, fmt.Errorf("tables[%d]: schema and table must be set", i))
		}
	}
	if cfg.HeartbeatPeriod < 0 || cfg.ReadTimeout < 0 {
		errs = append(errs, errors.New("heartbeat_period, read_timeout: must not be negative"))
	}
	if cfg.HeartbeatPeriod == 0 {
		cfg.HeartbeatPeriod = defaultHeartbeat
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 3 * cfg.HeartbeatPeriod
	}
	if cfg.ReadTimeout <= cfg.HeartbeatPeriod {
		errs = append(errs, fmt.Errorf("read_timeout: %s must exceed heartbeat_period %s, or idle streams time out", cfg.ReadTimeout, cfg.HeartbeatPeriod))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("binlog reader config: %w", errors.Join(errs...))
	}
	onUpdate := make(map[tableKey]string, len(cfg.Tables))
	for _, t := range cfg.Tables {
		onUpdate[tableKey{t.Schema, t.Table}] = t.OnUpdate
	}
	return &Reader{cfg: cfg, host: host, port: uint16(port), onUpdate: onUpdate}, nil
}

// Run streams from start — the executed set: the first transaction sent is the one after it —
// and sends each completed Txn to out, in binlog order. A transaction the start set covers is
// never sent, even when the server streams it (see startFilter). It blocks until ctx ends
// (returning ctx.Err()) or the stream fails (a broken connection, a decode error, a start
// position the server lacks, a row it cannot read); it does not reconnect. Transactions already
// sent stay valid on error; the caller restarts from its own checkpoint. Not safe for concurrent
// calls on one Reader.
func (r *Reader) Run(ctx context.Context, start gtid.Set, out chan<- *Txn) error {
	return r.run(ctx, start, start, out)
}

// run is Run with the position sent to the server (dump) apart from the start set the stream is
// filtered by, so a test can make a real server stream what a start set covers.
func (r *Reader) run(ctx context.Context, start, dump gtid.Set, out chan<- *Txn) error {
	if start.Flavor() != r.cfg.Flavor {
		return fmt.Errorf("binlog reader: start GTID set is %s, server flavor is %s", start.Flavor(), r.cfg.Flavor)
	}
	asm := NewAssembler(AssemblerConfig{
		Flavor: r.cfg.Flavor, Tables: r.cfg.Tables, Patterns: r.cfg.Patterns, Admit: r.cfg.Admit,
		Columns: r.cfg.Columns, Logger: r.cfg.Logger,
		CheckpointTable: r.cfg.CheckpointTable, RecordLayouts: r.cfg.Layouts != nil,
	})
	// The events are handled on go-mysql's own goroutine, as it decodes them, not handed
	// over its channel one by one: the hand-off (a select on each side, a wake-up) was 8% of
	// outboxd's CPU in a 1-row catch-up, about 5 events a transaction. Blocked on the
	// pipeline, the handler stops go-mysql's reading too, so nothing is read ahead.
	//
	// The server may stream transactions the start set covers (one that ignores the GTID set
	// streams everything): they are skipped here, never delivered again.
	startStr := start.String()
	h := &streamHandler{r: r, ctx: ctx, asm: asm, out: out, filter: newStartFilter(start), startStr: startStr}
	cfg := r.syncerConfig(asm.Filter())
	cfg.SynchronousEventHandler = h
	syncer := replication.NewBinlogSyncer(cfg)
	defer func() {
		syncer.Close() // waits for the handler to return
		h.reportSkipped()
	}()
	m := r.cfg.Metrics
	var runErr error
	defer func() { m.SourceConnected(false, runErr) }()

	// StartSyncGTID keeps and mutates the set it is given: nativeSet builds a new one.
	streamer, err := syncer.StartSyncGTID(nativeSet(dump))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		runErr = connErr(r.classify(err, startStr))
		return runErr
	}
	r.cfg.Logger.Info().Str("addr", r.cfg.Addr).Str("gtid", startStr).Msg("binlog stream started")

	// With a handler, GetEvent returns only how the stream ended: ctx, or an error of the
	// handler's or the connection's. The handler may still be running after ctx ended; h is
	// read only once the stream ended without it (the error's channel orders the reads).
	_, err = streamer.GetEvent(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if h.err != nil {
		return h.err
	}
	runErr = connErr(r.classify(err, startStr))
	return runErr
}

// streamHandler takes each binlog event on go-mysql's goroutine (SynchronousEventHandler):
// the start filter and the Assembler, then the finished transactions out. The first error it
// returns ends the stream and is kept in err.
type streamHandler struct {
	r         *Reader
	ctx       context.Context
	asm       *Assembler
	out       chan<- *Txn
	filter    *startFilter
	startStr  string
	streaming bool
	reported  bool
	err       error // read by run once the stream ended
}

// reportSkipped logs once per stream, when it gets past them or ends, the transactions the
// start position covered that the server streamed anyway. On the handler's goroutine, or
// once it returned for good.
func (h *streamHandler) reportSkipped() {
	if !h.reported && h.filter.skipped > 0 {
		h.reported = true
		h.r.cfg.Logger.Info().Int("skipped", h.filter.skipped).Str("gtid", h.startStr).
			Msg("skipped transactions the start position already covers: the server streamed them anyway")
	}
}

func (h *streamHandler) HandleEvent(ev *replication.BinlogEvent) error {
	if err := h.handle(ev); err != nil {
		h.err = err
		return err
	}
	return nil
}

func (h *streamHandler) handle(ev *replication.BinlogEvent) error {
	ctx, m := h.ctx, h.r.cfg.Metrics
	if !h.streaming {
		// The first event (the server's artificial rotate) shows the dump was accepted.
		h.streaming = true
		m.SourceConnected(true, nil)
	}
	if ev.Header != nil {
		m.BinlogEvent(int(ev.Header.EventSize))
	}
	if _, ok := ev.Event.(*replication.HeartbeatEvent); ok {
		m.Heartbeat()
	}
	txn, skip, err := assemble(ctx, h.asm, h.filter, ev)
	if err != nil {
		file, pos := h.asm.Position()
		return fmt.Errorf("binlog %s:%d: %w", file, pos, err)
	}
	if txn == nil {
		return nil
	}
	if skip {
		if !txn.Partial {
			m.TxnSkipped()
		}
		return nil
	}
	h.reportSkipped()
	if len(txn.Updates) > 0 {
		if err := h.r.updates(txn); err != nil {
			return err
		}
	}
	if txn.Layouts != nil && h.r.cfg.Layouts != nil {
		h.r.cfg.Layouts.LayoutChanged(txn)
	}
	if !txn.Partial && !txn.OnlyCheckpoint { // outboxd's own save: not a source transaction to lag behind
		m.TxnRead(txn.CommitTime)
	}
	select {
	case h.out <- txn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// assemble feeds one event to the start filter and the Assembler. It returns the transaction or
// piece the event completes (nil if none), and whether the start position covers it.
func assemble(ctx context.Context, asm *Assembler, f *startFilter, ev *replication.BinlogEvent) (txn *Txn, covered bool, err error) {
	f.observe(ev)
	if txn, err = asm.Handle(ctx, ev); err != nil || txn == nil {
		return nil, false, err
	}
	covered, err = f.covered(txn)
	return txn, covered, err
}

func (r *Reader) syncerConfig(filter TableFilter) replication.BinlogSyncerConfig {
	return replication.BinlogSyncerConfig{
		ServerID:  r.cfg.ServerID,
		Flavor:    string(r.cfg.Flavor),
		Host:      r.host,
		Port:      r.port,
		User:      r.cfg.User,
		Password:  r.cfg.Password,
		TLSConfig: r.cfg.TLS,
		Charset:   "utf8mb4",
		// The handshake cannot carry a collation MariaDB knows (see connCollation), so fix the
		// session right after connecting; SetCharset("utf8mb4") afterwards is then a no-op.
		Option: setConnCollation,
		// Time columns decode to time.Time instead of being formatted with fmt: outbox
		// tables often carry DATETIME columns outboxd does not send, and formatting them
		// was ~5% of catch-up CPU.
		ParseTime:  true,
		UseDecimal: false,
		// MySQL JSON columns are binary in the binlog; render them as MySQL's JSON text (key
		// order and number types kept) instead of Go's json.Marshal of decoded maps.
		RenderJSONAsMySQLText: true,
		HeartbeatPeriod:       r.cfg.HeartbeatPeriod,
		// ReadTimeout is enforced by the connections themselves (idleconn.go), not by
		// go-mysql's deadline per packet.
		Dialer: idleDialer(r.cfg.ReadTimeout),
		// We own reconnects: go-mysql's would silently replay a partly read transaction.
		DisableRetrySync: true,
		VerifyChecksum:   true,
		// Positions come from the Assembler; go-mysql's own set tracking is unused.
		DiscardGTIDSet:      true,
		RowsEventDecodeFunc: filter.DecodeRows,
		Logger:              libLogger(r.cfg.Logger),
	}
}

// setConnCollation fixes the dump connection's session character set right after connecting.
func setConnCollation(c *client.Conn) error {
	_, err := c.Execute("SET NAMES utf8mb4 COLLATE " + connCollation)
	return err
}

// classify turns server errors into messages that say what to change.
func (r *Reader) classify(err error, start string) error {
	var me *mysql.MyError
	if errors.As(err, &me) {
		sameID := me.Code == erSlaveSameID ||
			(me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG && strings.Contains(me.Message, "same server_uuid/server_id"))
		switch {
		case sameID:
			return &StopError{Setting: "source.server_id", Err: fmt.Errorf("%w: %w", ErrServerIDInUse, err),
				Problem: fmt.Sprintf("server %s dropped this binlog stream because another replica connected with server_id %d", r.cfg.Addr, r.cfg.ServerID),
				Fix:     "give every outboxd and every replica of this server its own source.server_id"}
		case me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG && strings.Contains(me.Message, "purged"): // 1236
			// MariaDB: "Could not find GTID state requested by slave in any binlog files.
			// Probably the slave state is too old and required binlog files have been purged."
			// MySQL: "...purged binary logs containing GTIDs that the slave requires."
			return &StopError{GTID: start, Err: fmt.Errorf("%w: %w", ErrGTIDNotOnServer, err),
				Problem: fmt.Sprintf("server %s no longer has the binlogs after GTID %q (%s); the transactions after it that were purged are lost to outboxd",
					r.cfg.Addr, start, me.Message),
				Fix: "choose a position the server still has with --from-gtid, or delete the checkpoint and use source.start: latest (both skip the purged events: data loss)"}
		case me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG:
			return &StopError{GTID: start, Setting: "source.addr", Err: fmt.Errorf("%w: %w", ErrGTIDNotOnServer, err),
				Problem: fmt.Sprintf("server %s cannot stream from GTID %q (%s); the position is ahead of the server's binlog or from another server",
					r.cfg.Addr, start, me.Message),
				Fix: "check source.addr, or restart from an explicit position with --from-gtid, or delete the checkpoint and use source.start: latest"}
		}
		switch me.Code {
		case mysql.ER_ACCESS_DENIED_ERROR: // 1045
			return &StopError{Setting: "source.user", Err: fmt.Errorf("%w: %w", ErrAccessDenied, err),
				Problem: fmt.Sprintf("server %s refused user %q on the binlog dump connection", r.cfg.Addr, r.cfg.User),
				Fix:     "check the password and that the user has REPLICATION SLAVE (MariaDB reports a missing grant as ERROR 1045)"}
		}
	}
	if strings.Contains(err.Error(), "i/o timeout") {
		return fmt.Errorf("binlog stream from %s: no data or heartbeat within %s: %w", r.cfg.Addr, r.cfg.ReadTimeout, err)
	}
	return fmt.Errorf("binlog stream from %s: %w", r.cfg.Addr, err)
}
