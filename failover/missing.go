// Package failover decides which candidate of source.addrs outboxd streams from, and compares
// histories: which transactions of the position outboxd resumes from (what it already
// delivered) a server lacks. The decisions (Choose, MariaDBMissing, MySQLMissing) do no I/O:
// Choose asks an Inspector for each candidate's facts in order, only as far as a decision
// needs. Sources is the thin I/O side: the candidates' pools and binlog readers, the
// Inspector over those pools (Pick), and the report of what the chosen one lacks.
package failover

import (
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/gtid"
)

// Missing is what of a position (the acknowledged set: transactions outboxd already
// delivered) a server's history lacks. After an asynchronous failover the promoted replica may
// lack the old primary's last transactions: outboxd delivered them, the database no longer has
// them.
type Missing struct {
	// Lines name the lacking transactions, one line per domain or source, for messages.
	Lines []string
	// Count is how many transactions that is (MariaDB: sequence numbers of the old server in
	// the domain, an upper bound when another server wrote in between).
	Count uint64
	// Behind is set when the server may get what it lacks yet. MariaDBMissing sets it when
	// the history has not moved past it (no later sequence number in the domain); Choose keeps
	// it only for a running replica (and sets it for any running MySQL replica).
	Behind bool
	// Shared is the newest position both histories share: the position with each lacking
	// domain (or source) cut back to what the server has. Streaming from it re-delivers what
	// follows on the server. SharedOK is false when it is not known (MariaDB: the server never
	// logged a transaction of the position's server in that domain).
	Shared   gtid.Set
	SharedOK bool
}

// Lacks reports whether anything is missing.
func (m Missing) Lacks() bool { return len(m.Lines) > 0 }

// MayCatchUp reports whether the server may still get what it lacks if it replicates: MariaDB
// when its history has not moved past the position (Behind), MySQL always (its sets cannot tell).
// Whether it does replicate is a fact of the server, asked only when this holds.
func (m Missing) MayCatchUp(flavor gtid.Flavor) bool {
	return m.Behind || flavor == gtid.MySQL
}

// MariaDBMissing compares pos with a server's @@gtid_binlog_state (the last sequence number each
// server id wrote in each domain). A GTID d-s-n of pos is on the server when server s's last in
// domain d is at least n (a server's own numbers only grow, and under gtid_strict_mode a domain's
// numbers do too): this sees a diverged history that a set comparison cannot, such as 0-2-105
// "containing" 0-1-105 after a failover although the server never had 0-1-105. The shared
// position of such a domain is d-s-m, server s's last there. Pure.
func MariaDBMissing(pos gtid.Set, state string) (Missing, error) {
	last, err := gtid.ParseBinlogState(state)
	if err != nil {
		return Missing{}, fmt.Errorf("gtid_binlog_state: %w", err)
	}
	want := pos.Positions()
	var out Missing
	out.SharedOK = true
	shared := make([]string, 0, len(want))
	for _, g := range want {
		m, ok := last.Last(g.Domain, g.Server)
		if ok && m >= g.Seq {
			shared = append(shared, g.String())
			continue
		}
		from := gtid.FormatMariaDB(g.Domain, g.Server, m+1)
		out.Lines = append(out.Lines, fmt.Sprintf("domain %d: %s..%s (the server's last of server id %d there is %s)",
			g.Domain, from, g, g.Server, lastText(g, m, ok)))
		out.Count += g.Seq - m
		if last.MaxSeq(g.Domain) < g.Seq {
			out.Behind = true // nothing newer in the domain: it may still replicate them
		}
		if !ok || m == 0 {
			out.SharedOK = false
			continue
		}
		shared = append(shared, gtid.FormatMariaDB(g.Domain, g.Server, m))
	}
	if !out.Lacks() {
		return Missing{Shared: pos, SharedOK: true}, nil
	}
	if out.SharedOK {
		if out.Shared, err = gtid.Parse(gtid.MariaDB, strings.Join(shared, ",")); err != nil {
			return Missing{}, err
		}
	}
	return out, nil
}

func lastText(g gtid.Position, m uint64, ok bool) string {
	if !ok {
		return "none"
	}
	return gtid.FormatMariaDB(g.Domain, g.Server, m)
}

// MySQLMissing compares pos with a server's @@gtid_executed: what pos has beyond it is missing
// (server UUIDs tell histories apart, so set difference is exact), and the shared position is
// their intersection. Whether the server is a replica still catching up cannot be told from
// the sets: Behind stays false. Pure.
func MySQLMissing(pos, executed gtid.Set) Missing {
	extra := pos.Subtract(executed)
	if extra.IsEmpty() {
		return Missing{Shared: pos, SharedOK: true}
	}
	return Missing{
		Lines:    []string{strings.ReplaceAll(extra.String(), "\n", "") + " (not in @@gtid_executed)"},
		Count:    extra.Count(),
		Shared:   pos.Subtract(extra),
		SharedOK: true,
	}
}
