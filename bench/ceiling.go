package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
)

// ceilingResult is go-mysql alone reading and decoding a binlog range.
type ceilingResult struct {
	Rows    int
	Elapsed time.Duration
	CPU     time.Duration // the harness's own CPU meanwhile (nothing else runs in it)
}

// readCeiling streams the binlog from start with go-mysql configured as outboxd's reader
// (binlog.Reader's syncerConfig) and no sink, counting the rows of WRITE_ROWS events on schema.
// tableName, until want rows were seen. It blocks; it fails on a stream error or ctx's end.
func readCeiling(ctx context.Context, addr string, serverID uint32, start, schema, tableName string, want int) (ceilingResult, error) {
	cfg, err := syncerConfig(addr, serverID, schema, tableName)
	if err != nil {
		return ceilingResult{}, err
	}
	set, err := mysql.ParseMariadbGTIDSet(start)
	if err != nil {
		return ceilingResult{}, fmt.Errorf("ceiling: parse start %q: %w", start, err)
	}
	cpu0 := selfCPU()
	t0 := time.Now()
	var res ceilingResult
	err = eachEvent(ctx, cfg, set, func(ev *replication.BinlogEvent) error {
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || re.Type() != replication.EnumRowsEventTypeInsert || re.Table == nil {
			return nil
		}
		if string(re.Table.Schema) == schema && string(re.Table.Table) == tableName {
			res.Rows += len(re.Rows)
		}
		if res.Rows >= want {
			res.Elapsed, res.CPU = time.Since(t0), selfCPU()-cpu0
			return errStopStream
		}
		return nil
	})
	if err != nil {
		return ceilingResult{Rows: res.Rows}, fmt.Errorf("ceiling: after %d of %d rows: %w", res.Rows, want, err)
	}
	return res, nil
}

// errStopStream, returned by eachEvent's f, ends the stream without an error.
var errStopStream = errors.New("stop the stream")

// eachEvent streams the binlog from set with cfg and calls f with every event on go-mysql's own
// goroutine (its SynchronousEventHandler, as binlog.Reader does), until f returns an error
// (errStopStream: none), the stream fails or ctx ends.
func eachEvent(ctx context.Context, cfg replication.BinlogSyncerConfig, set mysql.GTIDSet, f func(*replication.BinlogEvent) error) error {
	h := &funcHandler{f: f}
	cfg.SynchronousEventHandler = h
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	streamer, err := syncer.StartSyncGTID(set)
	if err != nil {
		return fmt.Errorf("start binlog stream at %s: %w", set, err)
	}
	_, err = streamer.GetEvent(ctx) // with a handler, only the stream's end
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(h.err, errStopStream):
		return nil
	case h.err != nil:
		return h.err
	}
	return fmt.Errorf("binlog stream: %w", err)
}

type funcHandler struct {
	f   func(*replication.BinlogEvent) error
	err error // read once the stream ended
}

func (h *funcHandler) HandleEvent(ev *replication.BinlogEvent) error {
	h.err = h.f(ev)
	return h.err
}

// syncerConfig is go-mysql configured as outboxd's reader (binlog.Reader's syncerConfig, with
// outboxd's default heartbeat) for one outbox table: the ceiling and the floor relay read with
// it, so they decode exactly what outboxd decodes. It sets no ReadTimeout: outboxd enforces its
// read timeout on the connection (binlog/idleconn.go), not with go-mysql's deadline before every
// packet, and the harness's own timeout bounds a stalled ceiling or floor.
func syncerConfig(addr string, serverID uint32, schema, tableName string) (replication.BinlogSyncerConfig, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return replication.BinlogSyncerConfig{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return replication.BinlogSyncerConfig{}, err
	}
	filter := binlog.NewTableFilter([]binlog.TableSpec{{Schema: schema, Table: tableName}})
	return replication.BinlogSyncerConfig{
		ServerID: serverID,
		Flavor:   mysql.MariaDBFlavor,
		Host:     host,
		Port:     uint16(port),
		User:     "root",
		Charset:  "utf8mb4",
		Option: func(c *client.Conn) error {
			_, err := c.Execute("SET NAMES utf8mb4 COLLATE utf8mb4_general_ci")
			return err
		},
		ParseTime:             true, // as outboxd's reader: DATETIME decodes to time.Time, not fmt text
		RenderJSONAsMySQLText: true,
		HeartbeatPeriod:       config.SourceHeartbeatPeriod,
		DisableRetrySync:      true,
		VerifyChecksum:        true,
		DiscardGTIDSet:        true,
		RowsEventDecodeFunc:   filter.DecodeRows,
		Logger:                slog.New(slog.DiscardHandler),
	}, nil
}
