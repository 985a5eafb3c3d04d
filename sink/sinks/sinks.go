// Package sinks opens the configured sinks (sinks:) as sink.Sink values: the one place that
// knows every sink type, shared by run, check and backfill.
package sinks

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/sink/kafkatxn"
	"github.com/outboxd/outboxd/sink/rocketmq"
)

// Open creates every configured sink. On error none is left open, and the error names
// every sink that failed (sinks.<name>: ...), sorted by name.
func Open(cfg *config.Config, log zerolog.Logger) (map[string]sink.Sink, error) {
	sinks, failed := OpenEach(cfg, log, log)
	if len(failed) == 0 {
		return sinks, nil
	}
	for _, s := range sinks {
		s.Close()
	}
	errs := make([]error, 0, len(failed))
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		errs = append(errs, failed[name])
	}
	return nil, errors.Join(errs...)
}

// OpenEach creates every configured sink, each on its own: one that fails to open does not
// keep the others from opening (check reports each). failed maps a sink's name to its error,
// which starts with "sinks.<name>: "; the caller closes the sinks it got. The sinks log to log;
// the RocketMQ client's own log (process-wide) goes to clientLog at warn and above, which
// check sets to zerolog.Nop(): its report already says what the client would log, and the
// client's lines would land between the report's.
func OpenEach(cfg *config.Config, log, clientLog zerolog.Logger) (sinks map[string]sink.Sink, failed map[string]error) {
	sinks = make(map[string]sink.Sink, len(cfg.Sinks))
	failed = map[string]error{}
	for _, sc := range cfg.Sinks {
		if sc.Type == "rocketmq" {
			// The RocketMQ client's logger is process-wide: route it once, warnings and up.
			rocketmq.RouteClientLog(clientLog, zerolog.WarnLevel)
			break
		}
	}
	for name, sc := range cfg.Sinks {
		var s sink.Sink
		var err error
		switch sc.Type {
		case "kafka":
			kc := kafka.Config{
				Brokers:         sc.Brokers,
				ClientID:        sc.ClientID,
				Timeout:         sc.Timeout,
				MaxMessageBytes: sc.MaxMessageBytes,
				Idempotent:      sc.KafkaIdempotent(),
				Logger:          log, // the sink adds sink=name
			}
			if kc.TLS, err = sc.TLS.ClientConfig(); err != nil {
				break
			}
			if kc.Compression, err = kafka.Codec(sc.Compression); err != nil {
				break
			}
			kc.SASL = KafkaSASL(sc.SASL)
			s, err = kafka.New(name, kc)
		case "rocketmq":
			s, err = rocketmq.New(name, rocketmq.Config{
				NameServers: sc.Nameservers,
				Group:       sc.Group,
				Namespace:   sc.Namespace,
				AccessKey:   sc.AccessKey,
				SecretKey:   sc.SecretKey,
				SendTimeout: sc.SendTimeout,
				Name:        name,
				Logger:      log, // the sink adds sink=name
			})
		default:
			err = fmt.Errorf("sink type %q is not supported by this build", sc.Type)
		}
		if err != nil {
			failed[name] = fmt.Errorf("sinks.%s: %w", name, err)
			continue
		}
		sinks[name] = s
	}
	return sinks, failed
}

// KafkaSASL converts a sink's sasl settings for the kafka package; nil stays nil. Pure.
func KafkaSASL(a *config.SASL) *kafka.SASL {
	if a == nil {
		return nil
	}
	return &kafka.SASL{Mechanism: a.Mechanism, Username: a.Username, Password: a.Password,
		TokenFile: a.TokenFile, Region: a.Region}
}

// StaticTopics lists the destination topics of sink name that have no placeholders, the ones
// check can verify before any row arrives.
func StaticTopics(cfg *config.Config, name string) []string {
	var topics []string
	for _, r := range cfg.Routes {
		if r.Sink == name && !strings.Contains(r.Topic, "{") {
			topics = append(topics, r.Topic)
		}
	}
	if dl := cfg.DeadLetter; dl != nil && cfg.OnPoison == config.OnPoisonDeadLetter && dl.Sink == name {
		topics = append(topics, dl.Topic)
	}
	return topics
}

// KafkaTxnOptions are the exactly-once session's options of cfg (delivery: exactly_once,
// checkpoint.store: kafka): checkpoint.sink's connection settings, the transactional id and the
// checkpoint topic. Config validation has made every Kafka sink of the routes share those
// settings. The caller sets Logger, OnFenced and OnTxn. It builds the TLS settings (reading the
// certificate files) and does no other I/O.
func KafkaTxnOptions(cfg *config.Config) (kafkatxn.Options, error) {
	name := cfg.Checkpoint.Sink
	sc, ok := cfg.Sinks[name]
	if !ok || sc.Type != "kafka" {
		return kafkatxn.Options{}, fmt.Errorf("checkpoint.sink %q is not a kafka sink", name)
	}
	tlsCfg, err := sc.TLS.ClientConfig()
	if err != nil {
		return kafkatxn.Options{}, fmt.Errorf("sinks.%s: %w", name, err)
	}
	return kafkatxn.Options{
		Name:               name,
		Brokers:            sc.Brokers,
		TLS:                tlsCfg,
		SASL:               KafkaSASL(sc.SASL),
		Compression:        sc.Compression,
		Timeout:            sc.Timeout,
		MaxMessageBytes:    sc.MaxMessageBytes,
		TransactionalID:    cfg.TransactionalID(),
		TransactionTimeout: cfg.Transactions.Timeout,
		Topic:              cfg.Checkpoint.Topic,
		Key:                cfg.Checkpoint.Name,
	}, nil
}

// KafkaTxnSinks are the sink names whose messages go through the exactly-once session: every
// Kafka sink a route or the dead letter names (config validation has made them one cluster
// with checkpoint.sink's settings), and checkpoint.sink. Pure.
func KafkaTxnSinks(cfg *config.Config) []string {
	names := map[string]bool{cfg.Checkpoint.Sink: true}
	for _, r := range cfg.Routes {
		names[r.Sink] = true
	}
	if dl := cfg.DeadLetter; dl != nil {
		names[dl.Sink] = true
	}
	return slices.Sorted(maps.Keys(names))
}
