package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultSlack widens the broker read on each side of the window. A row's created_at is its
// INSERT time, the record's time is later: the commit time (Kafka CreateTime, as outboxd sets
// it) or the store time (RocketMQ, after the commit and the relay's lag). Before the window the
// slack covers a created_at written by a client whose clock runs ahead of the server's.
const DefaultSlack = 5 * time.Minute

// Window is the half-open interval [Since, Until) of created_at that reconcile checks.
type Window struct {
	Since, Until time.Time
}

// Validate reports an empty or reversed window. Pure.
func (w Window) Validate() error {
	if w.Since.IsZero() || w.Until.IsZero() {
		return errors.New("--since and --until are both required")
	}
	if !w.Since.Before(w.Until) {
		return fmt.Errorf("--since %s is not before --until %s", w.Since.Format(time.RFC3339), w.Until.Format(time.RFC3339))
	}
	return nil
}

// Range is the record times a broker is read over for w: [Since-before, Until+after), from no
// earlier than the Unix epoch (a negative Kafka ListOffsets timestamp is a special value, not a
// time, and no broker stores a record before it). Pure.
func (w Window) Range(before, after time.Duration) (from, to time.Time) {
	from = w.Since.Add(-before)
	if epoch := time.Unix(0, 0); from.Before(epoch) {
		from = epoch
	}
	return from, w.Until.Add(after)
}

// ParseTime reads a window bound: an RFC 3339 time ("2026-12-01T10:00:00Z", fractions and
// offsets allowed), "now", or a duration relative to now ("-1h", "-90m", "-1h30m"; a leading
// "+" or none also counts from now). Pure given now.
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("empty time")
	}
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-12-01T10:00:00Z), now, or a duration from now (-1h)", s)
}
