package ops

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/metrics"
)

// startup is the start-up step under way and why it waits, which /readyz and /status report
// until the relay runs. Safe for concurrent use.
type startup struct {
	mu    sync.Mutex
	step  string
	err   error
	since time.Time // when err was first seen in this step
}

// reason is the one not-ready entry while starting: "starting: <step>", and what blocks it.
func (s *startup) reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := "starting: " + s.step
	if s.err != nil {
		msg += ": " + s.err.Error() + " (retrying since " + s.since.UTC().Format(time.RFC3339) + ")"
	}
	return msg
}

// Step records the start-up step under way, such as "connecting to source db1:3306", and
// clears what blocked the one before. It does not block.
func (o *Ops) Step(step string) {
	o.startup.mu.Lock()
	o.startup.step, o.startup.err, o.startup.since = step, nil, time.Time{}
	o.startup.mu.Unlock()
}

// Blocked records why the current step waits (it retries): the last error, which /readyz and
// /status show beside the step. It does not block.
func (o *Ops) Blocked(err error) {
	o.startup.mu.Lock()
	if o.startup.err == nil {
		o.startup.since = time.Now()
	}
	o.startup.err = err
	o.startup.mu.Unlock()
}

// sinkLog is what the operator was last told of each sink's reachability: a sink found
// unreachable is logged once at warn, and its recovery once at info. Only the sample loop
// uses it (not safe for concurrent use).
type sinkLog map[string]bool // sink name → up, as last logged

// update logs each sink whose reachability changed since the last call; a sink first seen up
// is not logged (nothing is wrong), one first seen down is.
func (l sinkLog) update(log zerolog.Logger, states map[string]metrics.SinkState) {
	for name, st := range states {
		was, seen := l[name]
		switch {
		case seen && was == st.Up:
			continue
		case !st.Up:
			log.Warn().Str("sink", name).Str("error", st.Error).
				Msg("sink unreachable: messages for it wait and are retried; /readyz reports it until it answers")
		case seen:
			log.Info().Str("sink", name).Msg("sink reachable again")
		}
		l[name] = st.Up
	}
}
