package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/binlog"
	"github.com/outboxd/outboxd/binlog/server"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/startpos"
)

// ErrMissingGTIDs: no source candidate has every transaction of the position outboxd resumes
// from (transactions it delivered that the database no longer has, after an asynchronous
// failover), and source.on_missing_gtids is stop.
var ErrMissingGTIDs = errors.New("no source candidate has every transaction outboxd already delivered")

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
func (s *sources) at(addr string) *config.Config { return cfgAt(s.cfg, addr) }

// cfgAt is a shallow copy of cfg with source.addr set to addr: every function that takes the
// config and talks to "the source" then talks to that server (a candidate of source.addrs, the
// checkpoint writer), verifies its TLS name, and names it in messages. Pure.
func cfgAt(cfg *config.Config, addr string) *config.Config {
	c := *cfg
	c.Source.Addr = addr
	return &c
}

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
	db, err := server.Open(ctx, SourceConn(s.at(addr)))
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

// candidateTimeout bounds pick's queries of one candidate (connect, checks, history).
const candidateTimeout = 10 * time.Second

// choice is the candidate pick chose.
type choice struct {
	addr string
	db   *sql.DB
	// resume, when set, is where to stream from instead of the position asked for: the newest
	// position this candidate shares with it (on_missing_gtids: continue), with what it lacks.
	resume *missingOn
}

// pick tries the candidates in order and returns the first that is reachable, passes the
// start-up checks and has every transaction of pos (any with hasPos false), with the binlogs
// after it (not purged). The error wraps
// binlog.ErrDisconnected when the caller should wait and try again (none reachable, or one
// that lacks pos is a replica still catching up), ErrPreflight when every reachable one fails
// the checks, ErrMissingGTIDs when every reachable, eligible one lacks part of pos and
// on_missing_gtids is stop (without the mysql store). Otherwise (goesOn) it returns the first such candidate whose shared
// position is known, in resume. verified names a candidate whose checks just passed (Run's
// start-up preflight), which are not run again. It blocks on a few queries per candidate.
func (s *sources) pick(ctx context.Context, pos gtid.Set, hasPos bool, verified string) (choice, error) {
	type lack struct {
		addr string
		db   *sql.DB
		m    missingOn
	}
	var lacking []lack
	var away, ineligible []string
	var refused, purged error
	for _, addr := range s.cfg.Source.Addrs {
		// Bounded per candidate: one cut off without a FIN must not hold up the next.
		cctx, cancel := context.WithTimeout(ctx, candidateTimeout)
		defer cancel()
		db, err := s.open(cctx, addr)
		if err == nil && addr != verified {
			err = preflight(cctx, db, s.at(addr), s.log)
		}
		var me *mysqldriver.MySQLError
		switch {
		case ctx.Err() != nil:
			return choice{}, ctx.Err()
		case errors.Is(err, ErrPreflight):
			ineligible = append(ineligible, fmt.Sprintf("%s: %v", addr, err))
			continue
		case errors.As(err, &me) && me.Number == 1045:
			refused = fmt.Errorf("source %s refused the login: %w", addr, err)
			ineligible = append(ineligible, refused.Error())
			continue
		case err != nil:
			away = append(away, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		if !hasPos {
			return s.chose(addr, db, nil), nil
		}
		m, err := missingAt(cctx, db, s.cfg.Source.Flavor, pos)
		if err != nil {
			away = append(away, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		if !m.lacks() {
			// It has them; its binlogs must still reach back to them too (a replica
			// restored from a backup, or one that purged sooner, may not).
			err := startpos.CheckPurged(cctx, startpos.SQL{DB: db}, s.cfg.Source.Flavor, pos, "checkpoint", s.cfg.Checkpoint.Where())
			switch {
			case err == nil:
				return s.chose(addr, db, nil), nil
			case errors.Is(err, startpos.ErrPurged):
				purged = fmt.Errorf("source %s: %w", addr, err)
				ineligible = append(ineligible, purged.Error())
				if len(s.cfg.Source.Addrs) > 1 {
					s.log.Warn().Str("source", addr).Err(err).Msg("source candidate skipped: its binlogs no longer reach back to the checkpoint")
				}
			default:
				away = append(away, fmt.Sprintf("%s: %v", addr, err))
			}
			continue
		}
		// Only a running replica may still receive what it lacks; a primary (a replica
		// promoted after a crash) never will. MariaDB also needs nothing newer in the domain.
		repl, err := server.Replicating(cctx, db, s.cfg.Source.Flavor)
		if err != nil {
			away = append(away, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		m.Behind = repl && (m.Behind || s.cfg.Source.Flavor == gtid.MySQL)
		lacking = append(lacking, lack{addr, db, m})
	}
	if len(lacking) == 0 {
		if len(ineligible) > 0 && len(away) == 0 {
			if refused != nil && len(ineligible) == 1 {
				return choice{}, refused
			}
			if purged != nil && len(ineligible) == 1 {
				return choice{}, purged
			}
			return choice{}, fmt.Errorf("%w: no source candidate passes the checks:\n  %s", ErrPreflight, strings.Join(ineligible, "\n  "))
		}
		return choice{}, fmt.Errorf("%w: no source candidate is reachable and eligible: %s", binlog.ErrDisconnected, strings.Join(append(away, ineligible...), "; "))
	}
	var lines []string
	for _, l := range lacking {
		if l.m.Behind {
			return choice{}, fmt.Errorf("%w: source %s lacks transactions outboxd already delivered but has nothing newer in their domain (a replica catching up?), waiting: %s",
				binlog.ErrDisconnected, l.addr, strings.Join(l.m.Lines, "; "))
		}
		lines = append(lines, fmt.Sprintf("%s lacks %s", l.addr, strings.Join(l.m.Lines, "; ")))
	}
	if goesOn(s.cfg) {
		for _, l := range lacking {
			if l.m.SharedOK {
				m := l.m
				return s.chose(l.addr, l.db, &m), nil
			}
		}
		return choice{}, fmt.Errorf("%w, and none shares a known position with it (on_missing_gtids: continue needs one):\n  %s\nset the position by hand: outboxd checkpoint set --gtid SET",
			ErrMissingGTIDs, strings.Join(lines, "\n  "))
	}
	shared := ""
	if m := lacking[0].m; m.SharedOK {
		shared = fmt.Sprintf(" (%s on %s)", m.Shared, lacking[0].addr)
	}
	return choice{}, fmt.Errorf("%w: position %s:\n  %s\n"+
		"outboxd delivered these transactions and the database no longer has them (an asynchronous failover discarded them?). "+
		"Either bring back a server that has them and list it in source.addrs, or accept their loss: set source.on_missing_gtids: continue "+
		"(outboxd logs and counts them, then resumes from the newest transaction both histories share%s and re-delivers what follows it there), "+
		"or give a position by hand with outboxd checkpoint set --gtid SET",
		ErrMissingGTIDs, pos, strings.Join(lines, "\n  "), shared)
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

func (s *sources) chose(addr string, db *sql.DB, resume *missingOn) choice {
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
func missingAt(ctx context.Context, db *sql.DB, flavor gtid.Flavor, pos gtid.Set) (missingOn, error) {
	if flavor == gtid.MySQL {
		executed, err := startpos.ServerPosition(ctx, startpos.SQL{DB: db}, flavor)
		if err != nil {
			return missingOn{}, err
		}
		return MySQLMissing(pos, executed), nil
	}
	var state string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state").Scan(&state); err != nil {
		return missingOn{}, fmt.Errorf("read gtid_binlog_state: %w", err)
	}
	return MariaDBMissing(pos, state)
}
