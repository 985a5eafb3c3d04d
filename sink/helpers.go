package sink

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Helpers the sinks share to keep the contract the same way.

// CascadeByKey fails every keyed message that follows a failed message with the same key (the
// contract's same-key rule), so the caller's resend cannot put a later message before an
// earlier one. errs[i] is message i's error; followers get an error wrapping notSent. Messages
// without a key are independent.
func CascadeByKey(msgs []*Message, errs []error, notSent error) {
	if !slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return // the common case: nothing failed, nothing to cascade
	}
	first := make(map[string]int)
	for i, m := range msgs {
		if m == nil || m.Key == nil {
			continue
		}
		if j, failed := first[string(m.Key)]; failed { // no allocation for the lookup
			if errs[i] == nil {
				errs[i] = fmt.Errorf("topic %s: message %d follows failed message %d with the same key: %w", m.Topic, i, j, notSent)
			}
			continue
		}
		if errs[i] != nil {
			first[string(m.Key)] = i
		}
	}
}

// Collect turns per-message errors into Send's result: nil when none failed, else a *SendError
// listing them in order. wrap, if not nil, rewrites each error first.
func Collect(errs []error, wrap func(error) error) error {
	var fs []Failure
	for i, err := range errs {
		if err == nil {
			continue
		}
		if wrap != nil {
			err = wrap(err)
		}
		fs = append(fs, Failure{Index: i, Err: err})
	}
	if len(fs) == 0 {
		return nil
	}
	return &SendError{Failures: fs}
}

// FanOut runs run(0) … run(n-1) concurrently, at most limit at a time, and waits for all. A
// task that has not started when ctx ends is not run: cancelled(i) is called instead, so its
// messages can be failed with ctx's error.
// One task runs on the caller's goroutine: a Kafka Send to a single leader, the common case,
// then starts no goroutine.
func FanOut(ctx context.Context, n, limit int, run, cancelled func(i int)) {
	if n == 1 {
		if ctx.Err() != nil {
			cancelled(0)
		} else {
			run(0)
		}
		return
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				cancelled(i)
				return
			}
			run(i)
		}()
	}
	wg.Wait()
}

// TimestampHint follows a broker's INVALID_TIMESTAMP in a Kafka sink's error: a record's time
// is its row's commit time on the database's clock (or its columns.timestamp), so a clock far
// off the brokers' is the likelier cause than the row.
const TimestampHint = "the record's time (the row's commit time on the database's clock, or its columns.timestamp) " +
	"is outside the topic's message.timestamp.after.max.ms or message.timestamp.before.max.ms of the broker's clock " +
	"(Kafka 4 refuses more than an hour ahead by default): compare the clocks (outboxd_source_clock_offset_seconds) or raise those topic settings"
