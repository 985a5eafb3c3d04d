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
