package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/failover"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/startpos"
)

// ErrMissingGTIDs is failover.ErrMissingGTIDs: no source candidate has every transaction of the
// position outboxd resumes from, and source.on_missing_gtids is stop.
var ErrMissingGTIDs = failover.ErrMissingGTIDs

// sources are the candidate servers of source.addrs, each with its pool and binlog reader, and
// the one streaming now. Safe for concurrent use.
type sources struct {
	cfg *config.Config
	m   *metrics.Metrics
	log zerolog.Logger

	mu      sync.Mutex
	dbs     map[string]*sql.DB
	readers map[string]*binlog.Reader
	cur     string
	// verified is the candidate whose checks Run's start-up preflight passed ("" when none).
	verified string
	// layouts learns the layouts after DDL statements the readers pass; set before the first
	// reader is made.
	layouts binlog.LayoutRecorder
}

func newSources(cfg *config.Config, m *metrics.Metrics, log zerolog.Logger) *sources {
	return &sources{cfg: cfg, m: m, log: log, dbs: map[string]*sql.DB{}, readers: map[string]*binlog.Reader{}, cur: cfg.Source.Addr}
}

// at is the config with source.addr set to addr (cfgAt).
func (s *sources) at(addr string) *config.Config { return s.cfg.SourceAt(addr) }

// current is the candidate streaming now (or last), and its pool (nil before it was opened).
func (s *sources) current() (string, *sql.DB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.dbs[s.cur]
}

// open returns addr's pool, opening it on first use (one attempt).
func (s *sources) open(ctx context.Context, addr string) (*sql.DB, error) {
	s.mu.Lock()
	db := s.dbs[addr]
	s.mu.Unlock()
	if db != nil {
		return db, nil
	}
	db, err := server.Open(ctx, server.SourceConn(s.at(addr)))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.dbs[addr]; old != nil {
		db.Close()
		return old, nil
	}
	s.dbs[addr] = db
	return db, nil
}

// adopt records db as addr's pool (the one Run opened with the start-up backoff).
func (s *sources) adopt(addr string, db *sql.DB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dbs[addr] = db
	s.cur = addr
}

// reader returns addr's binlog reader, created on first use.
func (s *sources) reader(ctx context.Context, addr string) (*binlog.Reader, error) {
	s.mu.Lock()
	r := s.readers[addr]
	db := s.dbs[addr]
	s.mu.Unlock()
	if r != nil {
		return r, nil
	}
	if db == nil {
		return nil, fmt.Errorf("source %s: not opened", addr)
	}
	r, err := newReader(ctx, s.at(addr), db, s.m, s.layouts, s.log)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.readers[addr] = r
	s.mu.Unlock()
	return r, nil
}

// close closes every pool.
func (s *sources) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, db := range s.dbs {
		db.Close()
	}
}

// choice is the candidate pick chose.
type choice struct {
	addr string
	db   *sql.DB
	// resume, when set, is where to stream from instead of the position asked for: the newest
	// position this candidate shares with it (on_missing_gtids: continue), with what it lacks.
	resume *failover.Missing
}

// pick chooses the candidate to stream from for pos (any with hasPos false) with
// failover.Choose, which asks the candidates in order over their pools. The error wraps
// binlog.ErrDisconnected when the caller should wait and try again, preflight.ErrNotSetUp when every
// reachable candidate fails the checks, ErrMissingGTIDs when every reachable, eligible one
// lacks part of pos and on_missing_gtids is stop (without the mysql store). verified names a
// candidate whose checks just passed (Run's start-up preflight), which are not run again. It
// blocks on a few queries per candidate.
func (s *sources) pick(ctx context.Context, pos gtid.Set, hasPos bool, verified string) (choice, error) {
	rules := failover.Rules{
		Addrs: s.cfg.Source.Addrs, Flavor: s.cfg.Source.Flavor, GoesOn: goesOn(s.cfg),
		Wait: binlog.ErrDisconnected, Ineligible: preflight.ErrNotSetUp,
	}
	ch, err := failover.Choose(ctx, rules, inspector{s: s, verified: verified}, pos, hasPos)
	if err != nil {
		return choice{}, err
	}
	s.mu.Lock()
	db := s.dbs[ch.Addr]
	s.mu.Unlock()
	return s.chose(ch.Addr, db, ch.Resume), nil
}

// inspector reads the facts failover.Choose asks of a candidate, over the candidate's pool.
type inspector struct {
	s        *sources
	verified string // a candidate whose start-up checks passed already
}

// Reach opens addr's pool (one attempt) and runs the start-up checks unless addr is verified.
func (in inspector) Reach(ctx context.Context, addr string) (failover.Reach, error) {
	db, err := in.s.open(ctx, addr)
	if err == nil && addr != in.verified {
		err = preflight.Gate(ctx, db, in.s.at(addr), in.s.log)
	}
	switch {
	case err == nil:
		return failover.Reachable, nil
	case errors.Is(err, preflight.ErrNotSetUp):
		return failover.Ineligible, err
	case sqlerr.LoginRefused(err):
		return failover.Refused, err
	default:
		return failover.Away, err
	}
}

// History compares pos with addr's history; when addr has all of pos, it checks that addr's
// binlogs still reach back to it, and when it lacks some, whether addr is a running replica.
func (in inspector) History(ctx context.Context, addr string, pos gtid.Set) (failover.Facts, error) {
	cfg := in.s.cfg
	db, err := in.s.open(ctx, addr)
	if err != nil {
		return failover.Facts{}, err
	}
	m, err := missingAt(ctx, db, cfg.Source.Flavor, pos)
	if err != nil {
		return failover.Facts{}, err
	}
	f := failover.Facts{Missing: m}
	if m.Lacks() {
		f.Replicating, err = server.Replicating(ctx, db, cfg.Source.Flavor)
		return f, err
	}
	err = startpos.CheckPurged(ctx, startpos.SQL{DB: db}, cfg.Source.Flavor, pos, "checkpoint", cfg.Checkpoint.Where())
	if errors.Is(err, startpos.ErrPurged) {
		if len(cfg.Source.Addrs) > 1 {
			in.s.log.Warn().Str("source", addr).Err(err).Msg("source candidate skipped: its binlogs no longer reach back to the checkpoint")
		}
		f.Purged, err = err, nil
	}
	return f, err
}

// goesOn reports whether a position no candidate has is given up for the newest one both
// histories share (logged and counted) rather than a stop: on_missing_gtids: continue, and
// always with the mysql store. Its row lives on the primary and replicates with the data, so
// the server outboxd fails over to holds a row it has every transaction of, and a process
// started there resumes from it without a word; a process that remembers more (it delivered
// what the failover lost) goes on as well, and says so, rather than stop where its successor
// would not.
func goesOn(cfg *config.Config) bool {
	return cfg.Source.OnMissingGTIDs == config.OnMissingContinue || cfg.Checkpoint.MySQL()
}

func (s *sources) chose(addr string, db *sql.DB, resume *failover.Missing) choice {
	s.mu.Lock()
	prev := s.cur
	s.cur = addr
	s.mu.Unlock()
	if prev != addr {
		s.log.Warn().Str("source", addr).Str("previous", prev).Msg("streaming from another source candidate")
	}
	return choice{addr: addr, db: db, resume: resume}
}

// missingAt is what of pos the server lacks: MariaDB by its gtid_binlog_state, MySQL by its
// gtid_executed. It blocks on one query.
func missingAt(ctx context.Context, db *sql.DB, flavor gtid.Flavor, pos gtid.Set) (failover.Missing, error) {
	if flavor == gtid.MySQL {
		executed, err := startpos.ServerPosition(ctx, startpos.SQL{DB: db}, flavor)
		if err != nil {
			return failover.Missing{}, err
		}
		return failover.MySQLMissing(pos, executed), nil
	}
	var state string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state").Scan(&state); err != nil {
		return failover.Missing{}, fmt.Errorf("read gtid_binlog_state: %w", err)
	}
	return failover.MariaDBMissing(pos, state)
}
