package failover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/startpos"
)

// Sources are the candidate servers of source.addrs, each with its pool and binlog reader, and
// the one streaming now. Safe for concurrent use.
type Sources struct {
	cfg *config.Config
	m   *metrics.Metrics
	log zerolog.Logger
	sc  SourcesConfig
	// dial and history are the I/O (sourcesio.go), replaced in the unit tests.
	dial    func(ctx context.Context, cfg *config.Config) (*sql.DB, error)
	history func(db *sql.DB) history

	mu      sync.Mutex
	dbs     map[string]*sql.DB
	readers map[string]*binlog.Reader
	cur     string
}

// NewSources returns the candidates of c.Config's source.addrs, none opened yet; the current
// one is source.addr. It does no I/O.
func NewSources(c SourcesConfig) *Sources {
	return &Sources{cfg: c.Config, m: c.Metrics, log: c.Log, sc: c, dial: dialSource, history: sqlHistory,
		dbs: map[string]*sql.DB{}, readers: map[string]*binlog.Reader{}, cur: c.Config.Source.Addr}
}

// At is the config with source.addr set to addr (config.SourceAt).
func (s *Sources) At(addr string) *config.Config { return s.cfg.SourceAt(addr) }

// Current is the candidate streaming now (or last), and its pool (nil before it was opened).
func (s *Sources) Current() (string, *sql.DB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.dbs[s.cur]
}

// open returns addr's pool, opening it on first use (one attempt).
func (s *Sources) open(ctx context.Context, addr string) (*sql.DB, error) {
	s.mu.Lock()
	db := s.dbs[addr]
	s.mu.Unlock()
	if db != nil {
		return db, nil
	}
	db, err := s.dial(ctx, s.At(addr))
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

// Adopt records db as addr's pool (the one Run opened with the start-up backoff).
// addr becomes the current candidate; Close closes db.
func (s *Sources) Adopt(addr string, db *sql.DB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dbs[addr] = db
	s.cur = addr
}

// Reader returns addr's binlog reader, created on first use.
// addr must have been opened (Adopt, or chosen by Pick). It blocks on what NewReader asks.
func (s *Sources) Reader(ctx context.Context, addr string) (*binlog.Reader, error) {
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
	r, err := s.sc.NewReader(ctx, s.At(addr), db)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.readers[addr] = r
	s.mu.Unlock()
	return r, nil
}

// Close closes every pool.
func (s *Sources) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, db := range s.dbs {
		db.Close()
	}
}

// Picked is the candidate Pick chose.
type Picked struct {
	Addr string
	DB   *sql.DB
	// Resume, when set, is where to stream from instead of the position asked for: the newest
	// position this candidate shares with it (on_missing_gtids: continue), with what it lacks.
	Resume *Missing
}

// Pick chooses the candidate to stream from for pos (any with hasPos false) with
// Choose, which asks the candidates in order over their pools, and makes it current. The error wraps
// binlog.ErrDisconnected when the caller should wait and try again, SourcesConfig.Ineligible when every
// reachable candidate fails the checks, ErrMissingGTIDs when every reachable, eligible one
// lacks part of pos and on_missing_gtids is stop (without the mysql store). verified names a
// candidate whose checks just passed (Run's start-up preflight), which are not run again. It
// blocks on a few queries per candidate.
func (s *Sources) Pick(ctx context.Context, pos gtid.Set, hasPos bool, verified string) (Picked, error) {
	rules := Rules{
		Addrs: s.cfg.Source.Addrs, Flavor: s.cfg.Source.Flavor, GoesOn: goesOn(s.cfg),
		Wait: binlog.ErrDisconnected, Ineligible: s.sc.Ineligible,
	}
	ch, err := Choose(ctx, rules, inspector{s: s, verified: verified}, pos, hasPos)
	if err != nil {
		return Picked{}, err
	}
	s.mu.Lock()
	db := s.dbs[ch.Addr]
	s.mu.Unlock()
	return s.chose(ch.Addr, db, ch.Resume), nil
}

// inspector reads the facts Choose asks of a candidate, over the candidate's pool.
type inspector struct {
	s        *Sources
	verified string // a candidate whose start-up checks passed already
}

// Reach opens addr's pool (one attempt) and runs the start-up checks unless addr is verified.
func (in inspector) Reach(ctx context.Context, addr string) (Reach, error) {
	db, err := in.s.open(ctx, addr)
	if err == nil && addr != in.verified {
		err = in.s.sc.Check(ctx, db, in.s.At(addr))
	}
	switch {
	case err == nil:
		return Reachable, nil
	case errors.Is(err, in.s.sc.Ineligible):
		return Ineligible, err
	case sqlerr.LoginRefused(err):
		return Refused, err
	default:
		return Away, err
	}
}

// History compares pos with addr's history; when addr has all of pos, it checks that addr's
// binlogs still reach back to it, and when it lacks some, whether addr is a running replica.
func (in inspector) History(ctx context.Context, addr string, pos gtid.Set) (Facts, error) {
	cfg := in.s.cfg
	db, err := in.s.open(ctx, addr)
	if err != nil {
		return Facts{}, err
	}
	srv := in.s.history(db)
	m, err := missingAt(ctx, srv, cfg.Source.Flavor, pos)
	if err != nil {
		return Facts{}, err
	}
	f := Facts{Missing: m}
	if m.Lacks() {
		f.Replicating, err = srv.Replicating(ctx, cfg.Source.Flavor)
		return f, err
	}
	err = startpos.CheckPurged(ctx, srv, cfg.Source.Flavor, pos, startpos.OriginCheckpoint, cfg.Checkpoint.Where())
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

func (s *Sources) chose(addr string, db *sql.DB, resume *Missing) Picked {
	s.mu.Lock()
	prev := s.cur
	s.cur = addr
	s.mu.Unlock()
	if prev != addr {
		s.log.Warn().Str("source", addr).Str("previous", prev).Msg("streaming from another source candidate")
	}
	return Picked{Addr: addr, DB: db, Resume: resume}
}

// missingAt is what of pos the server lacks: MariaDB by its gtid_binlog_state, MySQL by its
// gtid_executed. It blocks on one query.
func missingAt(ctx context.Context, srv startpos.Server, flavor gtid.Flavor, pos gtid.Set) (Missing, error) {
	if flavor == gtid.MySQL {
		executed, err := startpos.ServerPosition(ctx, srv, flavor)
		if err != nil {
			return Missing{}, err
		}
		return MySQLMissing(pos, executed), nil
	}
	state, _, err := srv.BinlogState(ctx)
	if err != nil {
		return Missing{}, fmt.Errorf("read gtid_binlog_state: %w", err)
	}
	return MariaDBMissing(pos, state)
}
