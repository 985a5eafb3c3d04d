package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/checkpoint/importpos"
	"github.com/outboxd/outboxd/checkpoint/store"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/tablelayout"
)

// readStore loads the mysql store's row or the kafka store's committed record for checkpoint
// show (the kafka store reads it back without fencing a running outboxd).
func readStore(ctx context.Context, cfg *config.Config) (*checkpoint.Checkpoint, error) {
	st, err := store.OpenOnce(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Load(ctx)
}

// cmdCheckpointMigrate copies a checkpoint from one store into the config's: the one step of
// moving a deployment between the file, the mysql and the kafka store (delivery: exactly_once
// and back).
func cmdCheckpointMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("checkpoint migrate", stdout, stderr)
	from := fs.String("from-file", "", "the checkpoint file to copy (the old checkpoint.path)")
	fromConfig := fs.String("from-config", "", "the old config: the checkpoint of its store (file, mysql or kafka) is copied")
	overwrite := fs.Bool("overwrite", false, "replace a checkpoint the config's store already holds")
	force := fs.Bool("force", false, "accept a set that lacks a source the server has")
	ignoreLeader := fs.Bool("ignore-leader", false, "write although a leader holds the lock (it is superseded and exits)")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	if (*from == "") == (*fromConfig == "") {
		return &exitError{code: 2, err: errors.New("give one of --from-file (the old checkpoint file) or --from-config (the old config, whatever its store)")}
	}
	var src checkpoint.Storage
	where := *from
	if *from != "" {
		if !cfg.Checkpoint.MySQL() && !cfg.Checkpoint.Kafka() {
			return &exitError{code: 2, err: errors.New("checkpoint.store is file in this config: --from-file copies a file into the mysql or kafka store; " +
				"set checkpoint.store: mysql (table, name) or kafka (name, sink, topic, with delivery: exactly_once), or copy the file itself")}
		}
		// Holding the file's lock keeps an outboxd that still runs on it from moving it meanwhile.
		if src, err = checkpoint.Open(*from); err != nil {
			return err
		}
	} else {
		old, err := readConfig(*fromConfig, config.Load)
		if err != nil {
			return err
		}
		where = old.Checkpoint.Where()
		if where == cfg.Checkpoint.Where() {
			return &exitError{code: 2, err: fmt.Errorf("--from-config names the same checkpoint as --config (%s): nothing to migrate", where)}
		}
		if src, err = store.OpenOnce(ctx, old); err != nil {
			return err
		}
	}
	defer src.Close()
	cp, err := src.Load(ctx)
	if err != nil {
		return err
	}
	if cp == nil {
		return &exitError{code: 1, err: fmt.Errorf("no checkpoint at %s: nothing to migrate", where)}
	}
	if cp.Flavor != cfg.Source.Flavor {
		return fmt.Errorf("checkpoint %s is for flavor %s but source.flavor is %s", where, cp.Flavor, cfg.Source.Flavor)
	}
	set, err := cp.Set()
	if err != nil {
		return err
	}
	st, old, err := store.OpenToReplace(ctx, cfg, set, store.ReplaceOptions{Force: *force, IgnoreLeader: *ignoreLeader})
	if err != nil {
		return refusal(err)
	}
	defer st.Close()
	if old != nil && !*overwrite {
		return fmt.Errorf("checkpoint %s already holds %s: pass --overwrite to replace it with %s from %s",
			cfg.Checkpoint.Where(), old.GTIDSet, cp.GTIDSet, where)
	}
	if err := store.Replace(ctx, cfg, st, *cp, "checkpoint migrate"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "checkpoint %s -> %s: %s\n", where, cfg.Checkpoint.Where(), cp.GTIDSet)
	return nil
}

// refusal gives a refusal because an outboxd runs on the checkpoint (store.ErrRunning) exit
// code 1, as every command exits with for it; other errors pass unchanged.
func refusal(err error) error {
	if errors.Is(err, store.ErrRunning) {
		return &exitError{code: 1, err: err}
	}
	return err
}

// currentLayouts reads the outbox tables' layouts on the source for checkpoint set
// --accept-layout.
func currentLayouts(ctx context.Context, cfg *config.Config) (checkpoint.Layouts, error) {
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		return nil, fmt.Errorf("connect to source to read the outbox tables' layouts: %w", err)
	}
	defer db.Close()
	return tablelayout.Current(ctx, db, cfg)
}

// cmdCheckpointImport turns the position Debezium, Maxwell or Canal saved into the checkpoint,
// for moving over from one of them: stop the tool, import, start outboxd.
func cmdCheckpointImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("checkpoint import", stdout, stderr)
	from := fs.String("from", "", "the tool whose position to import: debezium, maxwell or canal (required)")
	var src foreignSource
	file := fs.String("file", "", "debezium: the offset records (key and value JSON) or the answer of GET /connectors/<name>/offsets; canal: meta.dat or the ZooKeeper cursor node's content")
	connector := fs.String("connector", "", "debezium: the connector's name, when the file holds several connectors' offsets")
	clientID := fs.String("client-id", "", "maxwell: the client_id (default maxwell); canal: the clientId, when meta.dat holds several")
	schema := fs.String("maxwell-schema", "maxwell", "maxwell: the schema_database holding the positions table, read on the source")
	serverID := fs.Int64("server-id", -1, "maxwell: the positions row's server_id, when the client has several (0 is gtid_mode's row)")
	topic := fs.String("offsets-topic", "", "debezium: read the offsets from Kafka Connect's offsets topic (offset.storage.topic) instead of --file; needs --connector")
	kafkaSink := fs.String("kafka-sink", "", "debezium with --offsets-topic: the Kafka sink of the config whose brokers (and TLS, SASL) hold the topic; default the only Kafka sink")
	gtidPos := fs.Bool("binlog-gtid-pos", false, "debezium on MariaDB, for an offset without gtids: take the GTID state at its file and pos from the server (BINLOG_GTID_POS)")
	overwrite := fs.Bool("overwrite", false, "replace a checkpoint that already exists")
	force := fs.Bool("force", false, "accept a set that lacks a source the server has")
	ignoreLeader := fs.Bool("ignore-leader", false, "write the row although a leader holds the lock (it is superseded and exits)")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	tool := importpos.Tool(*from)
	src = foreignSource{tool: tool, file: *file, topic: *topic, kafkaSink: *kafkaSink, connector: *connector, clientID: *clientID, schema: *schema, serverID: *serverID}
	switch {
	case tool != importpos.Debezium && tool != importpos.Maxwell && tool != importpos.Canal:
		return &exitError{code: 2, err: fmt.Errorf("--from %q: want debezium, maxwell or canal", *from)}
	case tool == importpos.Maxwell && (*file != "" || *topic != ""):
		return &exitError{code: 2, err: errors.New("--file and --offsets-topic are not used with --from maxwell: its position is read from --maxwell-schema's positions table on the source")}
	case *topic != "" && tool != importpos.Debezium:
		return &exitError{code: 2, err: fmt.Errorf("--offsets-topic is for --from debezium only")}
	case *topic != "" && *file != "":
		return &exitError{code: 2, err: errors.New("give either --file or --offsets-topic, not both")}
	case *topic != "" && *connector == "":
		return &exitError{code: 2, err: errors.New("--offsets-topic needs --connector: the offsets topic holds every connector's offsets")}
	case tool != importpos.Maxwell && *file == "" && *topic == "":
		if tool == importpos.Debezium {
			return &exitError{code: 2, err: errors.New("--file or --offsets-topic is required with --from debezium")}
		}
		return &exitError{code: 2, err: fmt.Errorf("--file is required with --from %s", tool)}
	case *gtidPos && tool != importpos.Debezium:
		return &exitError{code: 2, err: fmt.Errorf("--binlog-gtid-pos is for --from debezium only: %s saves no transaction boundary to look up", tool)}
	}
	pos, err := readForeignPosition(ctx, cfg, src)
	if err != nil {
		return err
	}
	if *gtidPos && pos.GTIDSet == "" {
		if pos, err = gtidAtOffset(ctx, cfg, pos); err != nil {
			return err
		}
	}
	set, err := pos.Set(cfg.Source.Flavor)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	st, old, err := store.OpenToReplace(ctx, cfg, set, store.ReplaceOptions{Force: *force, IgnoreLeader: *ignoreLeader})
	if err != nil {
		return refusal(err)
	}
	defer st.Close()
	if old != nil && !*overwrite {
		return fmt.Errorf("checkpoint %s already holds %s: pass --overwrite to replace it with %s from %s", cfg.Checkpoint.Where(), old.GTIDSet, set, tool)
	}
	// Layouts at this position are unknown: none are written, and the first start records the
	// current ones with a warning, as after checkpoint set --gtid.
	cp := checkpoint.Checkpoint{Flavor: cfg.Source.Flavor, GTIDSet: set.String(), SavedAt: timeNow()}
	if err := store.Replace(ctx, cfg, st, cp, "checkpoint import"); err != nil {
		return err
	}
	prev := "(none)"
	if old != nil {
		prev = old.GTIDSet
	}
	fmt.Fprintf(stdout, "checkpoint %s: %s -> %s (the %s position %s)\n", cfg.Checkpoint.Where(), prev, cp.GTIDSet, tool, pos.Where)
	if pos.Partial != "" {
		fmt.Fprintf(stdout, "note: %s\n", pos.Partial)
	}
	return nil
}

// foreignSource is where checkpoint import reads a tool's position, from its flags.
type foreignSource struct {
	tool                importpos.Tool
	file                string
	topic, kafkaSink    string
	connector, clientID string
	schema              string
	serverID            int64
}

// readForeignPosition reads the tool's saved position: a file (or the offsets topic) for
// Debezium, a file for Canal, the positions table on the source for Maxwell.
func readForeignPosition(ctx context.Context, cfg *config.Config, src foreignSource) (importpos.Position, error) {
	switch {
	case src.tool == importpos.Maxwell:
		if src.clientID == "" {
			src.clientID = "maxwell"
		}
		db, err := server.Open(ctx, server.SourceConn(cfg))
		if err != nil {
			return importpos.Position{}, fmt.Errorf("connect to source to read Maxwell's positions: %w", err)
		}
		defer db.Close()
		return importpos.ReadMaxwell(ctx, db, src.schema, src.clientID, src.serverID)
	case src.topic != "":
		recs, err := readOffsetsTopic(ctx, cfg, src.kafkaSink, src.topic)
		if err != nil {
			return importpos.Position{}, err
		}
		return importpos.ReadDebeziumTopic(recs, src.connector)
	}
	f, err := os.Open(src.file)
	if err != nil {
		return importpos.Position{}, &exitError{code: 2, err: fmt.Errorf("--file: %w", err)}
	}
	defer f.Close()
	if src.tool == importpos.Debezium {
		return importpos.ReadDebezium(f, src.connector)
	}
	return importpos.ReadCanal(f, src.clientID)
}

// readOffsetsTopic reads every record of Kafka Connect's offsets topic on the Kafka sink named
// sinkName (the only Kafka sink when ""), with the sink's brokers, TLS and SASL. It blocks on
// the fetches; it commits nothing and needs Describe and Read on the topic.
func readOffsetsTopic(ctx context.Context, cfg *config.Config, sinkName, topic string) ([]importpos.KeyValue, error) {
	if sinkName == "" {
		var kafkaSinks []string
		for _, name := range slices.Sorted(maps.Keys(cfg.Sinks)) {
			if cfg.Sinks[name].Type == config.SinkKafka {
				kafkaSinks = append(kafkaSinks, name)
			}
		}
		if len(kafkaSinks) != 1 {
			return nil, &exitError{code: 2, err: fmt.Errorf("--kafka-sink is required: the config has %d Kafka sinks (%s); name the one whose cluster holds %s",
				len(kafkaSinks), strings.Join(kafkaSinks, ", "), topic)}
		}
		sinkName = kafkaSinks[0]
	}
	if sc, ok := cfg.Sinks[sinkName]; !ok || sc.Type != config.SinkKafka {
		return nil, &exitError{code: 2, err: fmt.Errorf("--kafka-sink %q is not a Kafka sink of this config", sinkName)}
	}
	readers, err := reconcile.OpenReaders(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	kr, ok := readers[sinkName].(*reconcile.KafkaReader)
	if !ok {
		return nil, fmt.Errorf("--kafka-sink %q: no Kafka reader for it", sinkName)
	}
	var recs []importpos.KeyValue
	err = kr.ReadTopic(ctx, topic, func(key, value []byte) error {
		recs = append(recs, importpos.KeyValue{Key: key, Value: value})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the offsets topic %s on sink %s: %w", topic, sinkName, err)
	}
	return recs, nil
}

// gtidAtOffset asks the source for the GTID state at pos's binlog offset (--binlog-gtid-pos).
func gtidAtOffset(ctx context.Context, cfg *config.Config, pos importpos.Position) (importpos.Position, error) {
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		return importpos.Position{}, fmt.Errorf("connect to source for --binlog-gtid-pos: %w", err)
	}
	defer db.Close()
	return importpos.FromBinlogOffset(ctx, db, cfg.Source.Flavor, pos)
}
