package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/election"
	"github.com/outboxd/outboxd/internal/sqlerr"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/preflight"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/sink/kafkatxn"
)

// roleState is this process's role as /status, /readyz and the metrics report it.
type roleState struct {
	Role   election.Role
	Epoch  uint64
	ConnID uint64
	Since  time.Time
	Reason string
}

// roleHolder keeps the current roleState. Safe for concurrent use; the zero value is a
// process that does not lead yet.
type roleHolder struct {
	mu        sync.Mutex
	st        roleState
	lastEpoch uint64 // of the last term led, for outboxd_leader_epoch
	// ha is set with ha.enabled: the lock's name, this process's id, the elector.
	ha *election.Elector
}

func (h *roleHolder) set(st roleState, m *metrics.Metrics) {
	h.mu.Lock()
	h.st = st
	if st.Epoch > 0 {
		h.lastEpoch = st.Epoch
	}
	epoch := h.lastEpoch
	h.mu.Unlock()
	// outboxd_leader_epoch is the current or last term's: a standby that led keeps its epoch.
	m.SetLeader(st.Role == election.RoleLeader, epoch)
}

func (h *roleHolder) get() roleState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

// leading reports whether this process leads now: the duties with side effects on the
// server (heartbeat row, position sampling) run only then.
func (h *roleHolder) leading() bool { return h.get().Role == election.RoleLeader }

// status is the ha part of /status.
func (h *roleHolder) status() admin.HA {
	st := h.get()
	out := admin.HA{Enabled: h.ha != nil, Role: string(st.Role), Epoch: st.Epoch, LockConnectionID: st.ConnID, Since: st.Since.UTC(), Reason: st.Reason}
	if out.Role == "" {
		out.Role = "starting"
	}
	if h.ha != nil {
		out.LockName, out.Holder = h.ha.LockName(), h.ha.Holder()
		if err := h.ha.WaitError(); err != nil && st.Role == election.RoleStandby {
			out.WaitError = err.Error()
		}
	}
	return out
}

// haRoles is the role loop of ha.enabled with the pool its lock connections come from.
type haRoles struct {
	*election.Roles
	db *sql.DB
}

func (h *haRoles) close() { h.db.Close() }

// newRoles wires the role loop for ha.enabled (nil without it): an elector on a pool of its own
// to the writer, claiming the mysql store's row for each term, leading through r.lead.
func newRoles(ctx context.Context, cfg *config.Config, r *relay, log zerolog.Logger) (*haRoles, error) {
	if !cfg.HA.Enabled {
		return nil, nil
	}
	ms, ok := r.saver.store.(checkpoint.Claimer)
	if !ok {
		return nil, errors.New("ha.enabled needs checkpoint.store: mysql") // config validation says why
	}
	conn := server.WriterConn(cfg)
	// Waited for like the store's writer: a writer restarting (or a reset path) at start is
	// not a reason to exit.
	db, err := server.OpenWithBackoff(ctx, conn, "leader lock writer", log)
	if err != nil {
		return nil, fmt.Errorf("leader lock on checkpoint.writer_addr %s: %w", conn.Addr, err)
	}
	if !slices.Contains(cfg.Source.SkipChecks, preflight.CheckCheckpointWriter) {
		// Gone again right away (restarting, a reset path): waited for as at start.
		var ro bool
		err := server.RetryTransient(ctx, log, "checkpoint writer's read_only not read: the connection failed, retrying", func() (err error) {
			ro, err = server.ReadOnly(ctx, db)
			return err
		})
		if err == nil && ro {
			err = fmt.Errorf("checkpoint.writer_addr %s is read-only (@@read_only ON, a replica?): point it at the writable primary; "+
				"the leader lock and the checkpoint row must live where the data is written, since a lock is not replicated and instances "+
				"pointed at different replicas would all lead [check %s]", conn.Addr, preflight.CheckCheckpointWriter)
		}
		if err != nil {
			db.Close()
			return nil, err
		}
	}
	e, err := election.New(election.Config{
		DB: db, Addr: conn.Addr, LockName: cfg.HA.LockName, Holder: election.NewHolderID(),
		Lease: cfg.HA.Lease, LongestSend: cfg.LongestSend(),
		Logger: log.With().Str("component", "election").Logger(),
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	r.role.ha = e
	ping, idle := election.Timeouts(cfg.HA.Lease, cfg.LongestSend())
	log.Info().Str("lock_name", e.LockName()).Str("holder", e.Holder()).Stringer("lease", cfg.HA.Lease).
		Stringer("ping_interval", ping).Stringer("lock_idle_timeout", idle).
		Stringer("takeover_bound", election.Takeover(cfg.HA.Lease, cfg.LongestSend())).
		Msg("ha: competing for the leader lock")
	roles := &election.Roles{
		Elector: e,
		Claim:   func(ctx context.Context) (uint64, error) { return ms.Claim(ctx, e.Holder()) },
		Lead:    func(ctx context.Context, t *election.Term, _ uint64) error { return r.lead(ctx, t) },
		Superseded: func(ctx context.Context) error {
			epoch, holder, found, err := ms.Token(ctx)
			if err != nil {
				return err
			}
			own, ownHolder := ms.OwnToken()
			if found && epoch == own && holder == ownHolder {
				return nil
			}
			return fmt.Errorf("checkpoint %s is now held by %q at epoch %d: %w", cfg.Checkpoint.Where(), holder, epoch, checkpoint.ErrSuperseded)
		},
		Cooldown: cfg.LongestSend(),
		OnChange: func(c election.Change) {
			st := roleState{Role: c.Role, Epoch: c.Epoch, Since: time.Now(), Reason: c.Reason}
			if c.Term != nil && c.Role == election.RoleLeader {
				st.ConnID = c.Term.ConnID()
			}
			if c.Role == election.RoleFenced {
				r.m.Fenced()
			}
			r.role.set(st, r.m)
		},
		Logger: log.With().Str("component", "election").Logger(),
	}
	return &haRoles{Roles: roles, db: db}, nil
}

// claimAlone makes this process the mysql store row's writer without ha: the newest process
// to start on a row wins, and an older one still running on it stops at its next save
// (superseded) rather than both relaying. The kafka store's claim fences the transactional id
// at the broker: an older process's next send or commit is refused there. A no-op for the
// file store, whose lock already keeps a second process out.
// It returns the row's new epoch (0 for the file store, or when ctx ended first).
func (r *relay) claimAlone(ctx context.Context) (uint64, error) {
	ms, ok := r.saver.store.(checkpoint.Claimer)
	if !ok {
		return 0, nil
	}
	holder := election.NewHolderID()
	var epoch uint64
	// A claim that a shutdown cut short is no failure to retry, nor to log.
	again := func(err error) bool { return !errors.Is(err, checkpoint.ErrStoreMisconfigured) && ctx.Err() == nil }
	msg := "checkpoint row not claimed (writer unreachable, or a lock wait), retrying"
	if _, kafka := ms.(*kafkatxn.Store); kafka {
		// Its claim (InitProducerID) waits out the coordinator's transient errors itself; a
		// cluster that cannot be reached at all (stopped, a network cut) is waited for here,
		// as the mysql store's writer is. Anything else is final: refused credentials, a
		// missing grant, a checkpoint topic set up wrong.
		again = func(err error) bool { return sqlerr.Transient(err) && ctx.Err() == nil }
		msg = "checkpoint not claimed: the Kafka brokers of checkpoint.sink are unreachable, retrying"
	}
	retry := server.ReconnectRetry(again)
	retry.OnRetry = func(err error, in time.Duration) {
		r.log.Warn().Err(err).Stringer("retry_in", in).Msg(msg)
	}
	err := retry.Do(ctx, func() (err error) {
		epoch, err = ms.Claim(ctx, holder)
		return err
	})
	if err != nil && ctx.Err() != nil {
		return 0, nil // stopped while claiming, or while the store was away
	}
	return epoch, err
}

// holder names this process in a tombstone: its token's holder with the mysql store, its host
// and pid with the file store.
func (r *relay) holder() string {
	if ms, ok := r.saver.store.(checkpoint.Claimer); ok {
		if _, h := ms.OwnToken(); h != "" {
			return h
		}
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("outboxd on %s pid %d", host, os.Getpid())
}
