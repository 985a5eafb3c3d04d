package server

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/internal/wait"
)

// Reconnect backoff after a lost connection to a server (the source or the checkpoint writer).
const (
	reconnectInitial = time.Second
	reconnectMax     = 10 * time.Second
	// ReconnectReset: a session that streamed this long starts the backoff over.
	ReconnectReset = time.Minute
)

// SourceConn returns how to reach the source over SQL, with source.tls applied. Pure besides
// reading a CA file of a Config built in code (one from config.Load has it in memory already).
func SourceConn(cfg *config.Config) Conn {
	c := Conn{Flavor: cfg.Source.Flavor, Addr: cfg.Source.Addr, User: cfg.Source.User, Password: cfg.Source.Password}
	c.TLS = sourceTLS(cfg)
	c.TLSFallback = cfg.Source.TLS.Enabled() && cfg.Source.TLS.Mode == config.TLSPreferred
	return c
}

// WriterConn is how the mysql store reaches the writable primary: source's credentials and TLS
// at checkpoint.writer_addr. Pure.
func WriterConn(cfg *config.Config) Conn {
	if a := cfg.Checkpoint.WriterAddr; a != "" {
		return SourceConn(cfg.SourceAt(a)) // verified by its own name, not the source's
	}
	return SourceConn(cfg)
}

// sourceTLS returns the TLS configuration of source.tls, nil when disabled. A CA file that
// cannot be read (only possible for a Config built in code) yields a configuration that fails
// every handshake with that error: failing closed, never falling back to plain text.
func sourceTLS(cfg *config.Config) *tls.Config {
	host, _, err := net.SplitHostPort(cfg.Source.Addr)
	if err != nil {
		host = cfg.Source.Addr
	}
	t, err := cfg.Source.TLS.ClientConfig(host)
	if err != nil {
		return &tls.Config{VerifyConnection: func(tls.ConnectionState) error { return err }}
	}
	return t
}

// BinlogTLS is the binlog connection's TLS: source.tls, except that with mode preferred it
// follows what the SQL connection db settled on, since go-mysql has no plain-text fallback.
// It blocks on one query in that case.
func BinlogTLS(ctx context.Context, cfg *config.Config, db *sql.DB) (*tls.Config, error) {
	t := sourceTLS(cfg)
	if t == nil || cfg.Source.TLS.Mode != config.TLSPreferred {
		return t, nil
	}
	on, err := UsesTLS(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("source.tls.mode preferred: %w", err)
	}
	if !on {
		return nil, nil
	}
	return t, nil
}

// OpenWithBackoff opens conn, waiting for a server that is restarting or a network that is
// briefly away with the reconnect backoff; a server that answers with an error (access denied,
// unknown database …) ends it at once. what names the server in the log. It blocks until then
// or ctx ends.
func OpenWithBackoff(ctx context.Context, conn Conn, what string, log zerolog.Logger) (*sql.DB, error) {
	return OpenReporting(ctx, conn, what, log, nil)
}

// OpenReporting is OpenWithBackoff that also hands each failed attempt it retries to
// retrying (when not nil), before the wait: the daemon's start-up state, which /readyz and
// /status show while the server is away. retrying must not block.
func OpenReporting(ctx context.Context, conn Conn, what string, log zerolog.Logger, retrying func(error)) (*sql.DB, error) {
	var db *sql.DB
	r := ReconnectRetry(func(err error) bool { return !sqlerr.Answered(err) && ctx.Err() == nil })
	r.OnRetry = func(err error, in time.Duration) {
		log.Warn().Err(err).Stringer("backoff", in).Msg(what + " not reachable at start, retrying")
		if retrying != nil {
			retrying(err)
		}
	}
	err := r.Do(ctx, func() (err error) {
		db, err = Open(ctx, conn)
		return err
	})
	return db, err
}

// RetryTransient calls f until it returns nil or an error that is an answer rather than a
// broken connection (sqlerr.Transient), waiting the reconnect backoff between tries and logging
// msg at each; when ctx ends while it waits, it returns ctx's error. For start-up queries, which
// wait for a server that is restarting (or a reset path) rather than exit.
func RetryTransient(ctx context.Context, log zerolog.Logger, msg string, f func() error) error {
	r := ReconnectRetry(func(err error) bool { return sqlerr.Transient(err) && ctx.Err() == nil })
	r.OnRetry = func(err error, in time.Duration) {
		log.Warn().Err(err).Stringer("retry_in", in).Msg(msg)
	}
	err := r.Do(ctx, f)
	if err != nil && sqlerr.Transient(err) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// ReconnectRetry is the reconnect backoff (ReconnectBackoff) that retries the errors again
// accepts; the caller sets the log line (OnRetry).
func ReconnectRetry(again func(error) bool) wait.Retry {
	return wait.Retry{Backoff: ReconnectBackoff(), Again: again}
}

// ReconnectBackoff is the backoff after a lost connection (1 s doubling to 10 s), shared by
// every loop that waits for a server or the checkpoint writer.
func ReconnectBackoff() wait.Backoff {
	return wait.Backoff{Initial: reconnectInitial, Max: reconnectMax}
}
