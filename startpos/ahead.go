package startpos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
)

// ErrAhead: the start set names transactions the server has not written. On MySQL the
// server would then skip its next transactions up to those numbers as already seen (silent loss);
// on MariaDB it may wait for them or stream from elsewhere. It comes from another server, a reset
// binlog or a typo; outboxd refuses it, with or without --force.
var ErrAhead = errors.New("start position is ahead of the server")

// Origin labels used for a start set given to `checkpoint set`.
const OriginCheckpointSet = "checkpoint set --gtid"

// Validate checks a start set given by origin (--from-gtid, source.start, checkpoint set
// --gtid) before it is used or saved: it must not lack a source the server has (unless force),
// must not be ahead of the server, and must not need purged binlogs. It blocks on a few
// queries; the error says what to change, in terms of the command that gave the set.
func Validate(ctx context.Context, srv Server, cfg *config.Config, start gtid.Set, origin string, force bool) error {
	serverPos, err := ServerPosition(ctx, srv, cfg.Source.Flavor)
	if err != nil {
		return err
	}
	return validate(ctx, srv, cfg, start, serverPos, origin, force)
}

// validate is Validate against serverPos, the server's position as already read.
func validate(ctx context.Context, srv Server, cfg *config.Config, start, serverPos gtid.Set, origin string, force bool) error {
	flavor := cfg.Source.Flavor
	if missing := start.MissingSources(serverPos); len(missing) > 0 && !force {
		what := "server UUIDs"
		if flavor == gtid.MariaDB {
			what = "domains"
		}
		return fmt.Errorf("%s %s lacks %s %s that the server has (%s): starting there would replay them from their first transaction; add their current positions to the set, or pass --force to do exactly that",
			origin, start, what, strings.Join(missing, ", "), serverPos)
	}
	if err := checkAhead(ctx, srv, start, serverPos, origin); err != nil {
		return err
	}
	return CheckPurged(ctx, srv, flavor, start, origin, cfg.Checkpoint.Where())
}

// checkAhead returns an ErrAhead error when start names transactions the server has not
// written. It blocks on one query for MariaDB.
func checkAhead(ctx context.Context, srv Server, start, serverPos gtid.Set, origin string) error {
	var lines []string
	var err error
	if start.Flavor() == gtid.MySQL {
		lines = MySQLAhead(start, serverPos)
	} else {
		state, strictOn, qerr := srv.BinlogState(ctx)
		if qerr != nil {
			return fmt.Errorf("read the server's gtid_binlog_state to check %s %s: %w", origin, start, qerr)
		}
		if lines, err = MariaDBAhead(start, serverPos, state, strictOn); err != nil {
			return fmt.Errorf("check %s %s against the server's position: %w", origin, start, err)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	pos := strings.ReplaceAll(serverPos.String(), "\n", "")
	return fmt.Errorf("%w: %s %s names transactions the server has not written (the server's position is %s):\n  %s\n"+
		"such a set comes from another server, a binlog that was reset, or a typo; check source.addr, then %s. --force does not bypass this check",
		ErrAhead, origin, start, pos, strings.Join(lines, "\n  "), startFix(origin, pos))
}

// startFix says how to give a better start set, in terms of the command that gave this one.
func startFix(origin, pos string) string {
	switch {
	case origin == OriginCheckpointSet:
		return fmt.Sprintf("give a set the server has, such as its position: outboxd checkpoint set --gtid '%s'", pos)
	case strings.HasPrefix(origin, "source.start"):
		return fmt.Sprintf("set source.start to a set the server has, such as its position '%s', or to latest", pos)
	case origin == OriginCheckpoint:
		return fmt.Sprintf("if this is the right server, replace the checkpoint: outboxd checkpoint set --gtid '%s' (its position; events since the checkpoint's true position are skipped)", pos)
	}
	return fmt.Sprintf("pass a set the server has, such as its position: --from-gtid '%s'", pos)
}

// MySQLAhead returns a line naming the GTIDs of start that are not in the server's
// @@gtid_executed, nil when start is a subset of it. Pure.
func MySQLAhead(start, executed gtid.Set) []string {
	extra := start.Subtract(executed)
	if extra.IsEmpty() {
		return nil
	}
	return []string{strings.ReplaceAll(extra.String(), "\n", "") + " are not in @@gtid_executed"}
}

// MariaDBAhead returns a line per domain of start whose GTID the server has certainly not
// written, nil when none. state is @@gtid_binlog_state: the last sequence number each server id
// wrote in each domain. A GTID d-s-n is ahead when server s's last in domain d is below n (a
// server numbers its own transactions above everything it has seen in the domain, so its
// numbers only grow). Without an entry for s, sequence numbers of other servers decide only
// under gtid_strict_mode (which keeps a domain's numbers increasing); otherwise the server
// decides when the stream starts (ERROR 1236). A domain the server has never written is left to
// MissingSources' counterpart on the server. Pure.
func MariaDBAhead(start, pos gtid.Set, state string, strict bool) ([]string, error) {
	last, err := gtid.ParseBinlogState(state)
	if err != nil {
		return nil, fmt.Errorf("gtid_binlog_state: %w", err)
	}
	var lines []string
	for _, g := range start.Positions() {
		cur, known := pos.Position(g.Domain)
		if m, ok := last.Last(g.Domain, g.Server); ok {
			if g.Seq > m {
				lines = append(lines, fmt.Sprintf("domain %d: %s is ahead of server id %d's last transaction in it, %s", g.Domain, g, g.Server, gtid.FormatMariaDB(g.Domain, g.Server, m)))
			}
			continue
		}
		if strict && known && g.Seq > cur.Seq {
			lines = append(lines, fmt.Sprintf("domain %d: %s is ahead of the domain's last transaction %s (gtid_strict_mode keeps its numbers increasing), and server id %d never wrote to it", g.Domain, g, cur, g.Server))
		}
	}
	return lines, nil
}

// ServerPosition is srv's Position with the error an operator reads at start. It blocks on
// srv; on error the Set is the zero Set.
func ServerPosition(ctx context.Context, srv Server, flavor gtid.Flavor) (gtid.Set, error) {
	pos, err := srv.Position(ctx, flavor)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("read the server's GTID position: %w", err)
	}
	return pos, nil
}
