package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/internal/logging"
)

// exitForced is the exit code of a second SIGINT or SIGTERM during shutdown: outboxd exits at
// once, without waiting for the sends in flight or writing the checkpoint again. Nothing is
// lost (the checkpoint on disk only covers acknowledged transactions); what was unacknowledged
// is sent again on the next start.
const exitForced = 3

// sameSignalWindow is how soon after the first stop signal the same signal again is taken for
// another delivery of the first, not for a second one: GNU timeout, and other supervisors that
// signal the process and then its process group, deliver one SIGTERM twice, usually within a
// millisecond. A person's second Ctrl-C, or a supervisor's second signal after its grace
// period, comes later and still forces the exit.
const sameSignalWindow = 500 * time.Millisecond

// signals turns process signals into the run's lifecycle: the first SIGINT or SIGTERM ends
// ctx (a graceful shutdown: drain, save, exit 0), a second one exits at once with exitForced
// (unless it is the first one's signal again within sameSignalWindow: one signal delivered to
// the process and to its group is counted once),
// and SIGHUP (logrotate, systemctl reload) is logged and ignored, since outboxd has nothing to
// reload and the default action would kill it without a drain. Safe for concurrent use.
type signals struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan os.Signal
	exit   func(code int)
	now    func() time.Time

	mu  sync.Mutex
	log zerolog.Logger
}

// handleSignals starts listening; the returned signals' ctx is the one to run under. Until
// useLogger is called, its log lines go to stderr as JSON.
func handleSignals(stderr io.Writer, exit func(int)) *signals {
	s := newSignals(stderr, exit)
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go s.loop()
	return s
}

func newSignals(stderr io.Writer, exit func(int)) *signals {
	ctx, cancel := context.WithCancel(context.Background())
	return &signals{
		ctx: ctx, cancel: cancel, ch: make(chan os.Signal, 4), exit: exit, now: time.Now,
		log: logging.New(stderr, zerolog.InfoLevel),
	}
}

// useLogger makes later signal log lines use the command's configured logger.
func (s *signals) useLogger(log zerolog.Logger) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.log = log
	s.mu.Unlock()
}

func (s *signals) logger() zerolog.Logger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log
}

// stop stops listening; signals then take their default action again.
func (s *signals) stop() {
	signal.Stop(s.ch)
	s.cancel()
}

func (s *signals) loop() {
	var first os.Signal // the signal that started the shutdown; nil before
	var firstAt time.Time
	for sig := range s.ch {
		log := s.logger()
		switch {
		case sig == syscall.SIGHUP:
			log.Info().Str("signal", "SIGHUP").
				Msg("SIGHUP ignored: outboxd has no configuration to reload; restart it to apply a changed config (logs go to stderr, so log rotation needs no signal)")
		case first == nil:
			first, firstAt = sig, s.now()
			log.Info().Str("signal", signalName(sig)).
				Msg("shutting down: letting the sends in flight finish and saving the checkpoint; send SIGINT or SIGTERM again to exit at once")
			s.cancel()
		case sig == first && s.now().Sub(firstAt) < sameSignalWindow:
			log.Debug().Str("signal", signalName(sig)).
				Msg("the same signal again right after the first (delivered to the process and to its group): still shutting down gracefully")
		default:
			log.Warn().Str("signal", signalName(sig)).Int("exit_code", exitForced).
				Msg("second signal: exiting at once without draining; the checkpoint on disk covers only acknowledged transactions, the rest is resent on the next start")
			s.exit(exitForced)
			return
		}
	}
}

func signalName(sig os.Signal) string {
	if sig == os.Interrupt {
		return "SIGINT"
	}
	if sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return sig.String()
}
