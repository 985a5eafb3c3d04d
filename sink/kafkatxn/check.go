package kafkatxn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outboxd/outboxd/sink"
)

var _ sink.Checker = (*Session)(nil)

// Check verifies that topics exist and that the checkpoint topic exists compacted with one
// partition, creating it so when missing (1 partition, cleanup.policy=compact, the broker's
// default replication factor and min.insync.replicas). It sends no InitProducerID: a session
// from New checks without fencing a running outboxd. It blocks until the brokers answered or
// ctx ends; the error names what to change.
func (s *Session) Check(ctx context.Context, topics []string) error {
	adm := kadm.NewClient(s.cl)
	var errs []error
	all := append([]string{s.o.Topic}, topics...)
	md, err := adm.Metadata(ctx, all...)
	if err != nil {
		return fmt.Errorf("kafka sink %q: brokers %s unreachable: %w", s.o.Name, strings.Join(s.o.Brokers, ","), err)
	}
	for _, t := range topics {
		td, ok := md.Topics[t]
		switch {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("topic %s does not exist: create it", t))
		case td.Err != nil:
			errs = append(errs, fmt.Errorf("topic %s: %w", t, td.Err))
		case len(td.Partitions) == 0:
			errs = append(errs, fmt.Errorf("topic %s has no partitions", t))
		}
	}
	if err := s.checkCheckpointTopic(ctx, adm, md.Topics[s.o.Topic]); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka sink %q: %w", s.o.Name, errors.Join(errs...))
	}
	return nil
}

// checkCheckpointTopic creates the checkpoint topic when td says it is missing, else verifies
// its partition count and cleanup.policy.
func (s *Session) checkCheckpointTopic(ctx context.Context, adm *kadm.Client, td kadm.TopicDetail) error {
	topic := s.o.Topic
	if td.Topic == "" || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		compact := "compact"
		res, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, topic)
		if err == nil {
			err = res.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("checkpoint topic %s does not exist and creating it failed: %w; create it with one partition and cleanup.policy=compact", topic, err)
		}
		s.o.Logger.Info().Str("topic", topic).Str("sink", s.o.Name).Msg("created the checkpoint topic (1 partition, cleanup.policy=compact)")
		return nil
	}
	if td.Err != nil {
		return fmt.Errorf("checkpoint topic %s: %w", topic, td.Err)
	}
	var errs []error
	if n := len(td.Partitions); n != 1 {
		errs = append(errs, fmt.Errorf("checkpoint topic %s has %d partitions: it needs exactly 1 (delete it and let `outboxd check` create it, or name another checkpoint.topic)", topic, n))
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		rc, err = rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && !isCompact(c.MaybeValue()) {
				errs = append(errs, fmt.Errorf("checkpoint topic %s has cleanup.policy=%s: it needs compact (kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact), or the checkpoint is deleted with old segments", topic, c.MaybeValue(), topic))
			}
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("checkpoint topic %s: describe configs: %w", topic, err))
	}
	return errors.Join(errs...)
}

// isCompact reports whether a cleanup.policy value is compaction alone: "delete" and
// "compact,delete" both drop old segments by age, which can delete the only checkpoint record.
func isCompact(policy string) bool {
	return strings.TrimSpace(policy) == "compact"
}
