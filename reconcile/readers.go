package reconcile

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/sink/kafka"
	"github.com/outboxd/outboxd/sink/sinks"
)

// OpenReaders returns a Reader for every configured sink, built from the sink's own settings
// (brokers, TLS, SASL, NameServers, namespace, ACL keys). It contacts nothing. On error none is
// left open.
func OpenReaders(cfg *config.Config) (map[string]Reader, error) {
	out := make(map[string]Reader, len(cfg.Sinks))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Sinks)) {
		sc := cfg.Sinks[name]
		switch sc.Type {
		case config.SinkKafka:
			kc := KafkaConfig{Brokers: sc.Brokers, ClientID: sc.ClientID, Timeout: sc.Timeout}
			var err error
			if kc.TLS, err = sc.TLS.ClientConfig(); err != nil {
				errs = append(errs, fmt.Errorf("sinks.%s.tls: %w", name, err))
				continue
			}
			if a := sinks.KafkaSASL(sc.SASL); a != nil {
				if kc.SASL, err = kafka.Mechanism(*a); err != nil {
					errs = append(errs, fmt.Errorf("sinks.%s.sasl: %w", name, err))
					continue
				}
			}
			out[name] = NewKafkaReader(kc)
		case config.SinkRocketMQ:
			out[name] = NewRocketMQReader(RocketMQConfig{
				NameServers: sc.Nameservers, Namespace: sc.Namespace,
				AccessKey: sc.AccessKey, SecretKey: sc.SecretKey, Timeout: max(sc.SendTimeout, 10*time.Second),
			})
		default:
			errs = append(errs, fmt.Errorf("sinks.%s: type %q cannot be read by reconcile", name, sc.Type))
		}
	}
	if len(errs) > 0 {
		for _, r := range out {
			r.Close()
		}
		return nil, errors.Join(errs...)
	}
	return out, nil
}
