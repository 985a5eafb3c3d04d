package failover

import (
	"context"

	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
)

// LostBehind reports the transactions of prev, the last checkpoint this process saved (or
// loaded) in an earlier term, that the picked candidate p no longer has (nothing when prev is
// the position Pick was given, picked). That happens when the checkpoint lives on the database
// (the mysql store) and an asynchronous crash failover lost the old primary's last
// transactions: the checkpoint row the new primary holds replicated with the data, so it is
// older and consistent with that server (outboxd resumes from it), but this process remembers
// delivering what the database lost. They are logged and counted as on_missing_gtids:
// continue's are, under either setting: there is nothing to stop for, the store's position is
// on the server. A process started after the failover cannot know them. It blocks on up to two
// queries, bounded by CandidateTimeout; a failed query reports nothing.
func (s *Sources) LostBehind(ctx context.Context, prev checkpoint.Checkpoint, picked gtid.Set, p Picked) {
	flavor := s.cfg.Source.Flavor
	if prev.Flavor != flavor {
		return
	}
	pos, err := prev.Set()
	if err != nil || pos.IsEmpty() || pos.Equal(picked) {
		return // the position Pick judged (and GaveUp reported) already
	}
	cctx, cancel := context.WithTimeout(ctx, CandidateTimeout)
	defer cancel()
	srv := s.history(p.DB)
	m, err := missingAt(cctx, srv, flavor, pos)
	if err != nil || !m.Lacks() {
		return
	}
	if m.MayCatchUp(flavor) {
		// A replica still catching up may have them yet (after a checkpoint set rewound the
		// store): no report.
		if repl, err := srv.Replicating(cctx, flavor); err != nil || repl {
			return
		}
	}
	for _, line := range m.Lines {
		s.log.Error().Str("source", p.Addr).Str("position", pos.String()).Str("missing", line).
			Msg(lostBehindMsg)
	}
	s.m.MissingTransactions(m.Count)
}

// lostBehindMsg is LostBehind's log message.
const lostBehindMsg = "these transactions were delivered and checkpointed by this process, and the database no longer has them (a crash failover lost them); resuming from the older checkpoint the store holds"

// GaveUp logs, once per lacking domain or source, the transactions outboxd delivered that the
// picked candidate no longer has (p.Resume, which must be set), and counts them. It does no I/O.
func (s *Sources) GaveUp(pos gtid.Set, p Picked) {
	for _, line := range p.Resume.Lines {
		s.log.Error().Str("source", p.Addr).Str("position", pos.String()).Str("resume_from", p.Resume.Shared.String()).
			Str("missing", line).Msg(s.gaveUpPrefix() + ": these transactions were delivered, and the database no longer has them; resuming from the newest position both histories share")
	}
	s.m.MissingTransactions(p.Resume.Count)
}

// gaveUpPrefix names why GaveUp goes on: the setting, or the store that makes it.
func (s *Sources) gaveUpPrefix() string {
	if s.cfg.Source.OnMissingGTIDs == config.OnMissingContinue {
		return "on_missing_gtids: continue"
	}
	return "checkpoint.store: mysql"
}
