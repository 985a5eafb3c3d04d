// Package admin serves outboxd's operator HTTP endpoints: /metrics (Prometheus), /healthz,
// /readyz and /status. It binds loopback by default (config admin.listen) and never serves a
// secret: the status holds positions, counts and states, not configuration.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Status is the /status document.
type Status struct {
	Version       string    `json:"version"`
	Flavor        string    `json:"flavor"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Ready and NotReady are what /readyz answers, from the same states (without its probe of
	// a sink whose state is stale): during start-up the step that holds it, such as a source
	// that is not reachable yet.
	Ready    bool     `json:"ready"`
	NotReady []string `json:"not_ready,omitempty"`
	Source   Source   `json:"source"`
	// ReadGTIDSet is the executed set through the newest transaction read.
	ReadGTIDSet string `json:"read_gtid_set"`
	// AckedGTIDSet is the executed set through the newest acknowledged transaction; the saved
	// checkpoint follows it within checkpoint.interval while saves succeed.
	AckedGTIDSet string `json:"acked_gtid_set"`
	// CheckpointGTIDSet is the checkpoint last written to checkpoint.path (or found there at
	// start): where a restart resumes. Never a position that is only in memory.
	CheckpointGTIDSet    string    `json:"checkpoint_gtid_set"`
	CheckpointSavedAt    time.Time `json:"checkpoint_saved_at"`
	CheckpointCommitTime time.Time `json:"checkpoint_commit_time"`
	// CheckpointSaveError is the error of the latest save while saves fail, "" otherwise.
	CheckpointSaveError    string    `json:"checkpoint_save_error,omitempty"`
	CheckpointFailingSince time.Time `json:"checkpoint_failing_since,omitzero"`

	LagSeconds           float64 `json:"lag_seconds"`
	OldestUnackedSeconds float64 `json:"oldest_unacked_event_age_seconds"`
	// OldestUnacked names the event behind OldestUnackedSeconds; nil when nothing is
	// unacknowledged.
	OldestUnacked *OldestEvent `json:"oldest_unacked_event,omitempty"`
	// CaughtUp is set when a recent heartbeat showed the server had nothing newer.
	CaughtUp bool            `json:"caught_up"`
	InFlight InFlight        `json:"in_flight"`
	Sinks    map[string]Sink `json:"sinks"`
	// HA is this process's role.
	HA HA `json:"ha"`
	// CatchUp is set while the checkpoint is behind the server.
	CatchUp *CatchUp `json:"catch_up,omitempty"`
}

// OldestEvent is the first event of the oldest transaction with unacknowledged events: the
// row whose delivery holds the checkpoint.
type OldestEvent struct {
	// Table is schema.table; ID the row's id column ("" when the table has none).
	Table   string `json:"table"`
	ID      string `json:"id,omitempty"`
	EventID string `json:"event_id"`
	// Topic and Sink are where its message goes (the dead-letter topic for a dead letter).
	Topic      string    `json:"topic"`
	Sink       string    `json:"sink"`
	GTID       string    `json:"gtid"`
	CommitTime time.Time `json:"commit_time,omitzero"`
	ReadAt     time.Time `json:"read_at"`
	// AgeSeconds is now minus ReadAt.
	AgeSeconds float64 `json:"age_seconds"`
}

// Source is the binlog stream's state.
type Source struct {
	Addr      string `json:"addr"`
	Connected bool   `json:"connected"`
	LastError string `json:"last_error,omitempty"`
}

// InFlight is what was read but not yet acknowledged.
type InFlight struct {
	Events int `json:"events"`
	Bytes  int `json:"bytes"`
}

// Sink is one sink's latest known state.
type Sink struct {
	Type string `json:"type"`
	// Up is the outcome of its latest send or probe; unknown before the first.
	Up    bool      `json:"up"`
	Known bool      `json:"known"`
	At    time.Time `json:"at,omitzero"`
	Error string    `json:"error,omitempty"`
	// NotReady are the /readyz entries about this sink (unreachable, a topic that does not
	// exist): a sink that answers while messages wait for a missing topic is not ready.
	NotReady []string `json:"not_ready,omitempty"`
}

// CatchUp estimates the remaining work while behind.
type CatchUp struct {
	// TransactionsBehind is the number of transactions the server has that are not yet
	// acknowledged (every transaction, outbox or not, sampled every 5 s).
	TransactionsBehind int64     `json:"transactions_behind"`
	RatePerSecond      float64   `json:"rate_per_second"`
	ETASeconds         float64   `json:"eta_seconds,omitempty"`
	SampledAt          time.Time `json:"sampled_at"`
}

// HA is the role part of /status.
type HA struct {
	// Enabled is ha.enabled; without it the process always leads.
	Enabled bool `json:"enabled"`
	// Role is leader, standby or fenced (lost the lock; it stands by again or exits).
	Role     string `json:"role"`
	LockName string `json:"lock_name,omitempty"`
	// Holder is this process's id, written to the checkpoint row with Epoch while it leads.
	Holder string `json:"holder,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// LockConnectionID is the server's id of the lock connection while leading.
	LockConnectionID uint64    `json:"lock_connection_id,omitempty"`
	Since            time.Time `json:"since"`
	// Reason says why the role last changed.
	Reason string `json:"reason,omitempty"`
	// WaitError is the last failure to reach the writer while standing by.
	WaitError string `json:"wait_error,omitempty"`
}

// Readiness is the /readyz document.
type Readiness struct {
	Ready bool `json:"ready"`
	// Role is leader or standby (ha): a standby that could take over is ready too.
	Role string `json:"role,omitempty"`
	// NotReady says what is not ready, one entry per component.
	NotReady []string `json:"not_ready,omitempty"`
}

// Config configures a Server. Gatherer, Status and Ready are required.
type Config struct {
	// Listen is host:port; port 0 picks a free port (see Server.Addr).
	Listen   string
	Gatherer prometheus.Gatherer
	// Status builds the /status document; it must be safe for concurrent use and quick.
	Status func(ctx context.Context) Status
	// Ready returns what is not ready, empty when everything is; safe for concurrent use. ctx
	// bounds any probe it makes.
	Ready func(ctx context.Context) []string
	// Role, when set, names the role /readyz reports.
	Role   func() string
	Logger zerolog.Logger
}

// Server is the admin HTTP server.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log zerolog.Logger
}

// Listen binds cfg.Listen and returns a Server that is not yet serving, so a port conflict is
// reported at start-up. On error nothing is bound.
func Listen(cfg Config) (*Server, error) {
	if cfg.Gatherer == nil || cfg.Status == nil || cfg.Ready == nil {
		return nil, errors.New("admin: Gatherer, Status and Ready are required")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin.listen %s: %w; choose another address, or set admin.listen: off", cfg.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog: zerologPrinter{cfg.Logger}, ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		notReady := cfg.Ready(ctx)
		role := ""
		if cfg.Role != nil {
			role = cfg.Role()
		}
		if len(notReady) > 0 {
			writeJSON(w, http.StatusServiceUnavailable, Readiness{Role: role, NotReady: notReady})
			return
		}
		writeJSON(w, http.StatusOK, Readiness{Ready: true, Role: role})
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, cfg.Status(r.Context()))
	})
	return &Server{
		ln:  ln,
		log: cfg.Logger,
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second},
	}, nil
}

// Addr is the bound address (with the real port when Listen asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx ends, then shuts down, waiting up to 5 s for requests in progress. It
// blocks; it returns nil after a shutdown and an error if serving failed.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	s.log.Info().Str("addr", s.Addr()).Msg("admin server listening (/metrics /healthz /readyz /status)")
	select {
	case err := <-errc:
		return fmt.Errorf("admin server %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutCtx); err != nil {
		s.srv.Close()
	}
	<-errc
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

// zerologPrinter adapts zerolog to promhttp's logger.
type zerologPrinter struct{ l zerolog.Logger }

func (z zerologPrinter) Println(v ...any) { z.l.Warn().Msg(strings.TrimSpace(fmt.Sprintln(v...))) }

// FetchStatus reads /status from the admin server at addr (host:port). It blocks until the
// answer arrived or ctx ends.
func FetchStatus(ctx context.Context, addr string) (*Status, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("admin.listen %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // listening on every interface: loopback reaches it
	}
	url := "http://" + net.JoinHostPort(host, port) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s (is outboxd running with this admin.listen?): %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("fetch %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("fetch %s: decode: %w", url, err)
	}
	return &st, nil
}

// Print writes st for a person. It does not block beyond w.
func (st *Status) Print(w io.Writer) error {
	var b strings.Builder
	conn := "connected"
	if !st.Source.Connected {
		conn = "NOT connected"
		if st.Source.LastError != "" {
			conn += ": " + st.Source.LastError
		}
	}
	fmt.Fprintf(&b, "outboxd %s, up %s (since %s)\n", st.Version, durationText(st.UptimeSeconds), st.StartedAt.Format(time.RFC3339))
	switch {
	case len(st.NotReady) > 0:
		for i, why := range st.NotReady {
			label := "             "
			if i == 0 {
				label = "NOT READY    "
			}
			b.WriteString(label + why + "\n")
		}
	case st.Ready:
		b.WriteString("ready        yes\n")
	}
	if h := st.HA; h.Enabled {
		fmt.Fprintf(&b, "role         %s since %s (lock %s, holder %s", h.Role, h.Since.Format(time.RFC3339), h.LockName, h.Holder)
		if h.Epoch > 0 {
			fmt.Fprintf(&b, ", epoch %d", h.Epoch)
		}
		b.WriteString(")\n")
		if h.Reason != "" {
			fmt.Fprintf(&b, "             %s\n", h.Reason)
		}
		if h.WaitError != "" {
			fmt.Fprintf(&b, "             CANNOT WAIT FOR THE LOCK: %s\n", h.WaitError)
		}
	}
	fmt.Fprintf(&b, "source       %s %s, %s\n", st.Flavor, st.Source.Addr, conn)
	fmt.Fprintf(&b, "read         %s\n", orNone(st.ReadGTIDSet))
	fmt.Fprintf(&b, "acked        %s\n", orNone(st.AckedGTIDSet))
	fmt.Fprintf(&b, "checkpoint   %s\n", orNone(st.CheckpointGTIDSet))
	if !st.CheckpointSavedAt.IsZero() {
		fmt.Fprintf(&b, "             saved %s, covers commits up to %s\n", st.CheckpointSavedAt.Format(time.RFC3339), timeText(st.CheckpointCommitTime))
	}
	if st.CheckpointSaveError != "" {
		fmt.Fprintf(&b, "             NOT SAVING since %s (reading paused): %s\n", st.CheckpointFailingSince.Format(time.RFC3339), st.CheckpointSaveError)
	}
	lag := durationText(st.LagSeconds)
	if st.CaughtUp {
		lag = "0s (caught up)"
	}
	fmt.Fprintf(&b, "lag          %s; oldest unacknowledged event %s old\n", lag, durationText(st.OldestUnackedSeconds))
	if o := st.OldestUnacked; o != nil {
		id := ""
		if o.ID != "" {
			id = " id " + o.ID
		}
		fmt.Fprintf(&b, "oldest       event_id %q (%s%s, gtid %s) for %s topic %s, read %s ago\n",
			o.EventID, o.Table, id, o.GTID, o.Sink, o.Topic, durationText(o.AgeSeconds))
	}
	fmt.Fprintf(&b, "in flight    %d events, %d bytes\n", st.InFlight.Events, st.InFlight.Bytes)
	if c := st.CatchUp; c != nil {
		eta := "unknown"
		if c.ETASeconds > 0 {
			eta = durationText(c.ETASeconds)
		}
		fmt.Fprintf(&b, "catching up  %d transactions behind, %.0f/s, ETA %s\n", c.TransactionsBehind, c.RatePerSecond, eta)
	}
	names := make([]string, 0, len(st.Sinks))
	for n := range st.Sinks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := st.Sinks[n]
		state := "unknown (nothing sent or probed yet)"
		switch {
		case !s.Known:
		case !s.Up:
			state = "DOWN: " + s.Error
		case len(s.NotReady) > 0:
			// The same words as /readyz, without the "sink <name>: " this line starts with.
			whys := make([]string, len(s.NotReady))
			for i, why := range s.NotReady {
				whys[i] = strings.TrimPrefix(why, "sink "+n+": ")
			}
			state = "NOT READY: " + strings.Join(whys, "; ")
		default:
			state = "up"
		}
		fmt.Fprintf(&b, "sink %-7s %s %s\n", n, s.Type, state)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orNone(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "(unknown)"
	}
	return t.Format(time.RFC3339)
}

func durationText(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
