package startpos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/gtid"
)

// ErrPurged: the start position needs binlogs the server has purged. Streaming from it
// would fail (MariaDB/MySQL ERROR 1236) or, after a jump, skip events; only an operator can
// decide to accept that loss, so outboxd refuses to start. No flag bypasses it, not --force.
var ErrPurged = errors.New("start position needs purged binlogs")

// PurgedGap describes the transactions after start that the server no longer has, one line per
// source, and returns the nearest start set the server can still serve (start moved forward
// over the purged ranges). purged is what server.Purged returns: MySQL @@gtid_purged, MariaDB
// the Gtid_list at the start of the oldest binlog. For MariaDB a domain is missing transactions
// when start's sequence number for it is below the Gtid_list's (or start lacks the domain while
// the Gtid_list has it). lines is nil when nothing is missing. It does no I/O.
func PurgedGap(start, purged gtid.Set) (lines []string, nearest gtid.Set, err error) {
	if purged.IsEmpty() {
		return nil, start, nil
	}
	if start.Flavor() != purged.Flavor() {
		return nil, gtid.Set{}, fmt.Errorf("start set is %s, purged set is %s", start.Flavor(), purged.Flavor())
	}
	if start.Flavor() == gtid.MySQL {
		missing := purged.Subtract(start)
		if missing.IsEmpty() {
			return nil, start, nil
		}
		txt := strings.ReplaceAll(missing.String(), "\n", "")
		lines = append(lines, txt+" are purged (@@gtid_purged is "+strings.ReplaceAll(purged.String(), "\n", "")+")")
		nearest, err = gtid.Parse(gtid.MySQL, strings.ReplaceAll(start.String()+","+purged.String(), "\n", ""))
		if start.IsEmpty() {
			nearest, err = purged.Clone(), nil
		}
		return lines, nearest, err
	}
	nearest = start.Clone()
	if nearest.IsEmpty() {
		nearest = gtid.Empty(gtid.MariaDB)
	}
	for _, p := range purged.Positions() {
		if p.Seq == 0 {
			continue
		}
		s, ok := start.Position(p.Domain)
		if ok && s.Seq >= p.Seq {
			continue
		}
		last := p.String()
		first := gtid.FormatMariaDB(p.Domain, p.Server, 1)
		if ok {
			first = gtid.FormatMariaDB(p.Domain, p.Server, s.Seq+1)
		}
		line := fmt.Sprintf("domain %d: %s … %s are purged; the oldest binlog starts after %s", p.Domain, first, last, last)
		if !ok {
			line += fmt.Sprintf(" (the start set has no position for domain %d, so it would start at the domain's first transaction)", p.Domain)
		}
		lines = append(lines, line)
		if err := nearest.Add(last); err != nil {
			return nil, gtid.Set{}, err
		}
	}
	if lines == nil {
		return nil, start, nil
	}
	return lines, nearest, nil
}

// CheckPurged returns an ErrPurged error when streaming from start needs binlogs the
// server has purged. The error names the missing transactions and both ways out, each of which
// is an explicit decision to lose those events. It blocks on a few queries; on a query failure
// it returns that error (the start is not known to be safe).
func CheckPurged(ctx context.Context, srv Server, flavor gtid.Flavor, start gtid.Set, origin, checkpointPath string) error {
	purged, err := srv.Purged(ctx, flavor)
	if err != nil {
		return fmt.Errorf("check that the server still has the binlogs after %s %s: %w", origin, start, err)
	}
	lines, nearest, err := PurgedGap(start, purged)
	if err != nil {
		return fmt.Errorf("check %s %s against the server's purged binlogs: %w", origin, start, err)
	}
	if len(lines) == 0 {
		return nil
	}
	retry := "outboxd run --from-gtid"
	if origin == OriginCheckpointSet {
		retry = "outboxd checkpoint set --gtid"
	}
	return fmt.Errorf("%w: %s %s needs transactions the server has purged from its binlogs, so outboxd cannot deliver them:\n  %s\n"+
		"outboxd does not skip them on its own. To go on without them (data loss: these events are never delivered), either "+
		"start at the oldest position the server still has: %s '%s'; "+
		"or delete the checkpoint %s and set source.start: latest, which also skips everything up to the server's current position. "+
		"--force does not bypass this check",
		ErrPurged, origin, start, strings.Join(lines, "\n  "), retry, strings.ReplaceAll(nearest.String(), "\n", ""), checkpointPath)
}
