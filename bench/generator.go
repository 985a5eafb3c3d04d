package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/internal/outboxtable"
)

const (
	benchSchema = "bench"
	// payloadBytes is the size of every generated JSON payload.
	payloadBytes = 1024
	// distinctKeys is how many message keys the generators spread rows over.
	distinctKeys = 10000
	// rowsPerInsert bounds one multi-row INSERT inside a bigger transaction.
	rowsPerInsert = 50
	// logicalTopic is the topic column's value; routes send it to the benchmark topic.
	logicalTopic = "order.created"
)

// schemaSQL creates the outbox table outboxd reads (the README's shape) and the polling relay's
// table (the reference article's mq_outbox, plus biz_key so both relays partition by the same key).
var schemaSQL = []string{
	"CREATE DATABASE IF NOT EXISTS " + benchSchema,
	outboxtable.DDLIfNotExists("bench.outbox_event"),
	`CREATE TABLE IF NOT EXISTS bench.mq_outbox (
  id            BIGINT PRIMARY KEY AUTO_INCREMENT,
  msg_key       VARCHAR(64)  NOT NULL,
  biz_key       VARCHAR(64)  NOT NULL,
  topic         VARCHAR(128) NOT NULL,
  payload       TEXT         NOT NULL,
  status        TINYINT      NOT NULL DEFAULT 0,
  retry_count   INT          NOT NULL DEFAULT 0,
  next_retry_at DATETIME     NOT NULL DEFAULT CURRENT_TIMESTAMP,
  created_at    DATETIME     NOT NULL DEFAULT CURRENT_TIMESTAMP,
  sent_at       DATETIME     NULL,
  UNIQUE KEY uk_msg_key (msg_key),
  KEY idx_status_retry (status, next_retry_at)
)`,
}

// table says which outbox table a generator writes.
type table int

const (
	outboxTable table = iota // bench.outbox_event, read by outboxd
	pollTable                // bench.mq_outbox, read by the polling relay
)

func (t table) String() string {
	if t == pollTable {
		return "bench.mq_outbox"
	}
	return "bench.outbox_event"
}

// openGenDB opens a pool on the bench schema whose statements are interpolated client side, so
// each Exec is exactly one statement (one Questions count) with no prepare round trips.
func openGenDB(dsn string, conns int) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	cfg.DBName = benchSchema
	cfg.InterpolateParams = true
	cfg.MaxAllowedPacket = 0 // read the server's max_allowed_packet
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql connector: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(conns + 4)
	db.SetMaxIdleConns(conns + 4)
	return db, nil
}

// payload returns a 1 KiB JSON document for row i.
func payload(i int) string {
	var b strings.Builder
	b.Grow(payloadBytes)
	b.WriteString(`{"order_id":`)
	b.WriteString(strconv.Itoa(i))
	b.WriteString(`,"customer":"c-`)
	b.WriteString(strconv.Itoa(i % distinctKeys))
	b.WriteString(`","amount_cents":`)
	b.WriteString(strconv.Itoa(100 + i%99900))
	b.WriteString(`,"currency":"EUR","note":"`)
	for b.Len() < payloadBytes-2 {
		b.WriteByte('x')
	}
	b.WriteString(`"}`)
	return b.String()
}

func bizKey(i int) string { return "k" + strconv.Itoa(i%distinctKeys) }

// insertSQL returns a multi-row INSERT of n rows into t.
func insertSQL(t table, n int) string {
	var b strings.Builder
	if t == pollTable {
		b.WriteString("INSERT INTO bench.mq_outbox (msg_key, biz_key, topic, payload) VALUES ")
	} else {
		b.WriteString("INSERT INTO bench.outbox_event (event_id, biz_key, topic, event_type, payload) VALUES ")
	}
	for j := 0; j < n; j++ {
		if j > 0 {
			b.WriteByte(',')
		}
		if t == pollTable {
			b.WriteString("(?,?,?,?)")
		} else {
			b.WriteString("(?,?,?,?,?)")
		}
	}
	return b.String()
}

// rowArgs appends row i's values (event id id) to args.
func rowArgs(t table, args []any, id string, i int) []any {
	if t == pollTable {
		return append(args, id, bizKey(i), logicalTopic, payload(i))
	}
	return append(args, id, bizKey(i), logicalTopic, "OrderCreated", payload(i))
}

// execer is a connection or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insertRows inserts rows [from, to) with ids prefix+i in INSERTs of at most rowsPerInsert rows
// and returns the number of statements sent.
func insertRows(ctx context.Context, ex execer, t table, prefix string, from, to int) (int64, error) {
	var stmts int64
	var args []any
	for lo := from; lo < to; lo += rowsPerInsert {
		hi := min(lo+rowsPerInsert, to)
		args = args[:0]
		for i := lo; i < hi; i++ {
			args = rowArgs(t, args, prefix+strconv.Itoa(i), i)
		}
		if _, err := ex.ExecContext(ctx, insertSQL(t, hi-lo), args...); err != nil {
			return stmts, fmt.Errorf("insert rows %d..%d into %s: %w", lo, hi, t, err)
		}
		stmts++
	}
	return stmts, nil
}

// bulkSpec describes rows generated before a relay starts.
type bulkSpec struct {
	Table   table
	Rows    int
	TxnRows int    // rows per transaction: 1 = autocommit single-row INSERTs
	Conns   int    // parallel connections
	Prefix  string // event ids are Prefix+i
}

// bulkGenerate commits spec.Rows rows in transactions of spec.TxnRows over spec.Conns connections.
// It blocks until all are committed or the first error (then some rows may be committed).
func bulkGenerate(ctx context.Context, db *sql.DB, spec bulkSpec) (time.Duration, error) {
	start := time.Now()
	txns := (spec.Rows + spec.TxnRows - 1) / spec.TxnRows
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, spec.Conns)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < spec.Conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := db.Conn(ctx)
			if err != nil {
				errc <- err
				cancel()
				return
			}
			defer conn.Close()
			for {
				t := int(next.Add(1) - 1)
				if t >= txns || ctx.Err() != nil {
					return
				}
				from, to := t*spec.TxnRows, min((t+1)*spec.TxnRows, spec.Rows)
				if err := commitRows(ctx, conn, spec.Table, spec.Prefix, from, to); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	return time.Since(start), ctx.Err()
}

// commitRows commits rows [from, to) as one transaction (autocommit for one row).
func commitRows(ctx context.Context, conn *sql.Conn, t table, prefix string, from, to int) error {
	if to-from == 1 {
		_, err := insertRows(ctx, conn, t, prefix, from, to)
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if _, err := insertRows(ctx, tx, t, prefix, from, to); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit rows %d..%d: %w", from, to, err)
	}
	return nil
}

// gtidPos returns the server's executed GTID set.
func gtidPos(ctx context.Context, db *sql.DB) (string, error) {
	var pos string
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return "", fmt.Errorf("read @@gtid_binlog_pos: %w", err)
	}
	return pos, nil
}

// steadySpec describes a paced generator run.
type steadySpec struct {
	Table    table
	Rate     float64 // commits per second
	Duration time.Duration
	Conns    int
	Prefix   string // ids are eventID(Prefix, Run, i)
	Run      int
}

// steadyResult is what a paced run did.
type steadyResult struct {
	Committed int
	Elapsed   time.Duration // from the first due time to the last commit
	Stmts     int64         // statements the generator sent (one autocommit INSERT per row)
	Behind    int           // due rows never sent because the generator fell behind
}

// steadyGenerate commits one row per transaction at spec.Rate for spec.Duration (open loop: the
// schedule does not wait for slow commits) and stamps each commit's return into tr.commit. It
// blocks until the run ends; rows still queued 2 s after the end are dropped and counted.
func steadyGenerate(ctx context.Context, db *sql.DB, spec steadySpec, tr *tracker, epoch time.Time) (steadyResult, error) {
	total := min(int(spec.Rate*spec.Duration.Seconds()), len(tr.commit))
	due := make(chan int, total)
	var res steadyResult
	start := time.Now()
	tr.start.Store(int64(start.Sub(epoch)) + 1)
	runCtx, cancel := context.WithTimeout(ctx, spec.Duration+2*time.Second)
	defer cancel()

	go func() { // the pacer
		defer close(due)
		emitted := 0
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for emitted < total {
			target := min(int(time.Since(start).Seconds()*spec.Rate)+1, total)
			for ; emitted < target; emitted++ {
				due <- emitted
			}
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
		}
	}()

	var committed, stmts atomic.Int64
	var last atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, spec.Conns)
	for w := 0; w < spec.Conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := db.Conn(runCtx)
			if err != nil {
				errc <- err
				return
			}
			defer conn.Close()
			q := insertSQL(spec.Table, 1)
			var args []any
			for i := range due {
				if runCtx.Err() != nil {
					return
				}
				args = rowArgs(spec.Table, args[:0], eventID(spec.Prefix, spec.Run, i), i)
				tr.sent[i].Store(int64(time.Since(epoch)) + 1)
				if _, err := conn.ExecContext(runCtx, q, args...); err != nil {
					if runCtx.Err() == nil {
						errc <- fmt.Errorf("steady insert %d: %w", i, err)
					}
					return
				}
				now := int64(time.Since(epoch)) + 1
				tr.commit[i].Store(now)
				last.Store(now)
				committed.Add(1)
				stmts.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	res.Committed = int(committed.Load())
	res.Stmts = stmts.Load()
	res.Behind = total - res.Committed
	if l := last.Load(); l > 0 {
		res.Elapsed = time.Duration(l-1) - start.Sub(epoch)
	}
	if err := <-errc; err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// latencies computes receive − commit for every committed row of tr, in ms.
func latencies(tr *tracker) *LatencyStats {
	var ms []float64
	missing, early, earliest := 0, 0, 0.0
	for i := range tr.commit {
		c := tr.commit[i].Load()
		if c == 0 {
			continue
		}
		r := tr.recv[i].Load()
		if r == 0 {
			missing++
			continue
		}
		d := float64(r-c) / 1e6
		if d < 0 {
			early++
			earliest = min(earliest, d)
			d = 0
		}
		ms = append(ms, d)
	}
	return latencyStats(ms, missing, early, earliest)
}

// waitReceived waits until every committed row of tr was received or timeout passes.
func waitReceived(ctx context.Context, tr *tracker, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		all := true
		for i := range tr.commit {
			if tr.commit[i].Load() != 0 && tr.recv[i].Load() == 0 {
				all = false
				break
			}
		}
		if all {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
