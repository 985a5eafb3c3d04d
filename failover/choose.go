package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/gtid"
)

// ErrMissingGTIDs: no source candidate has every transaction of the position outboxd resumes
// from (transactions it delivered that the database no longer has, after an asynchronous
// failover), and source.on_missing_gtids is stop.
var ErrMissingGTIDs = errors.New("no source candidate has every transaction outboxd already delivered")

// CandidateTimeout bounds Choose's questions to one candidate (connect, checks, history): one
// cut off without a FIN must not hold up the next.
const CandidateTimeout = 10 * time.Second

// Reach is how a candidate answered a connection and the start-up checks.
type Reach int

const (
	// Reachable: connected, and the checks passed.
	Reachable Reach = iota
	// Away: no answer, or a question failed; it may come back.
	Away
	// Ineligible: it answered, and fails the start-up checks.
	Ineligible
	// Refused: it refused the login (MySQL error 1045).
	Refused
)

// Facts are what a reachable candidate's history says about the position.
type Facts struct {
	// Missing is what of the position the candidate lacks.
	Missing Missing
	// Replicating reports whether it is a running replica; only read when Missing lacks
	// something.
	Replicating bool
	// Purged, when set, is the refusal to stream from the position because the candidate
	// purged the binlogs after it; only read when Missing lacks nothing.
	Purged error
}

// Inspector reads the facts of one candidate. Choose calls it for one candidate at a time, in
// the order of Rules.Addrs, and stops at the first it chooses.
type Inspector interface {
	// Reach connects to addr and runs its start-up checks; the error says why it is not
	// Reachable (it is ignored for Reachable).
	Reach(ctx context.Context, addr string) (Reach, error)
	// History compares pos with addr's history (asked only of a Reachable candidate). An error
	// means a question failed: the candidate counts as away.
	History(ctx context.Context, addr string, pos gtid.Set) (Facts, error)
}

// Rules are the settings Choose decides by.
type Rules struct {
	// Addrs are the candidates (source.addrs), in order of preference.
	Addrs  []string
	Flavor gtid.Flavor
	// GoesOn gives up a position no candidate has for the newest one both histories share
	// (on_missing_gtids: continue, or the mysql store) rather than stop with ErrMissingGTIDs.
	GoesOn bool
	// Wait is wrapped by the error when the caller should wait and try again (none reachable,
	// or one lacks the position and is a replica still catching up); Ineligible when every
	// reachable candidate fails the checks. They are the caller's sentinels, so that its
	// callers branch on a failed pick as on a lost stream or a failed start-up check.
	Wait, Ineligible error
}

// Choice is the candidate Choose chose.
type Choice struct {
	Addr string
	// Resume, when set, is where to stream from instead of the position asked for: the newest
	// position this candidate shares with it (GoesOn), with what it lacks.
	Resume *Missing
}

// Choose tries the candidates in order and returns the first that is reachable, passes the
// start-up checks and has every transaction of pos (any, with hasPos false), with the binlogs
// after it (not purged). The error wraps r.Wait when the caller should wait and try again,
// r.Ineligible when every reachable one fails the checks (or, alone, the refused login or the
// purge refusal of the one ineligible candidate), ErrMissingGTIDs when every reachable,
// eligible one lacks part of pos and r.GoesOn is false; with r.GoesOn it returns the first
// such candidate whose shared position is known, in Resume. It blocks on in's questions, each
// candidate's bounded by CandidateTimeout, and returns ctx's error when ctx ends.
func Choose(ctx context.Context, r Rules, in Inspector, pos gtid.Set, hasPos bool) (Choice, error) {
	type lack struct {
		addr string
		m    Missing
	}
	var lacking []lack
	var away, ineligible []string
	var refused, purged error
	for _, addr := range r.Addrs {
		cctx, cancel := context.WithTimeout(ctx, CandidateTimeout)
		defer cancel()
		reach, err := in.Reach(cctx, addr)
		switch {
		case ctx.Err() != nil:
			return Choice{}, ctx.Err()
		case reach == Ineligible:
			ineligible = append(ineligible, fmt.Sprintf("%s: %v", addr, err))
			continue
		case reach == Refused:
			refused = fmt.Errorf("source %s refused the login: %w", addr, err)
			ineligible = append(ineligible, refused.Error())
			continue
		case reach != Reachable:
			away = append(away, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		if !hasPos {
			return Choice{Addr: addr}, nil
		}
		f, err := in.History(cctx, addr, pos)
		if err != nil {
			away = append(away, fmt.Sprintf("%s: %v", addr, err))
			continue
		}
		m := f.Missing
		if !m.Lacks() {
			// It has them; its binlogs must still reach back to them too (a replica
			// restored from a backup, or one that purged sooner, may not).
			if f.Purged == nil {
				return Choice{Addr: addr}, nil
			}
			purged = fmt.Errorf("source %s: %w", addr, f.Purged)
			ineligible = append(ineligible, purged.Error())
			continue
		}
		// Only a running replica may still receive what it lacks; a primary (a replica
		// promoted after a crash) never will. MariaDB also needs nothing newer in the domain.
		m.Behind = f.Replicating && m.MayCatchUp(r.Flavor)
		lacking = append(lacking, lack{addr, m})
	}
	if len(lacking) == 0 {
		if len(ineligible) > 0 && len(away) == 0 {
			if refused != nil && len(ineligible) == 1 {
				return Choice{}, refused
			}
			if purged != nil && len(ineligible) == 1 {
				return Choice{}, purged
			}
			return Choice{}, fmt.Errorf("%w: no source candidate passes the checks:\n  %s", r.Ineligible, strings.Join(ineligible, "\n  "))
		}
		return Choice{}, fmt.Errorf("%w: no source candidate is reachable and eligible: %s", r.Wait, strings.Join(append(away, ineligible...), "; "))
	}
	var lines []string
	for _, l := range lacking {
		if l.m.Behind {
			return Choice{}, fmt.Errorf("%w: source %s lacks transactions outboxd already delivered but has nothing newer in their domain (a replica catching up?), waiting: %s",
				r.Wait, l.addr, strings.Join(l.m.Lines, "; "))
		}
		lines = append(lines, fmt.Sprintf("%s lacks %s", l.addr, strings.Join(l.m.Lines, "; ")))
	}
	if r.GoesOn {
		for _, l := range lacking {
			if l.m.SharedOK {
				m := l.m
				return Choice{Addr: l.addr, Resume: &m}, nil
			}
		}
		return Choice{}, fmt.Errorf("%w, and none shares a known position with it (on_missing_gtids: continue needs one):\n  %s\nset the position by hand: outboxd checkpoint set --gtid SET",
			ErrMissingGTIDs, strings.Join(lines, "\n  "))
	}
	shared := ""
	if m := lacking[0].m; m.SharedOK {
		shared = fmt.Sprintf(" (%s on %s)", m.Shared, lacking[0].addr)
	}
	return Choice{}, fmt.Errorf("%w: position %s:\n  %s\n"+
		"outboxd delivered these transactions and the database no longer has them (an asynchronous failover discarded them?). "+
		"Either bring back a server that has them and list it in source.addrs, or accept their loss: set source.on_missing_gtids: continue "+
		"(outboxd logs and counts them, then resumes from the newest transaction both histories share%s and re-delivers what follows it there), "+
		"or give a position by hand with outboxd checkpoint set --gtid SET",
		ErrMissingGTIDs, pos, strings.Join(lines, "\n  "), shared)
}
