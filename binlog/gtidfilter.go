package binlog

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/gtid"
)

// logEventArtificial is LOG_EVENT_ARTIFICIAL_F: the server made the event up for this dump
// (the first Rotate, and MariaDB's Gtid_list that marks the reached start position); it is in
// no binlog file.
const logEventArtificial = 0x20

// startFilter keeps transactions the start position already covers from being delivered again,
// whatever the server streams. A server that honours the position sends none of them; one that
// ignores it (Dolt, for the MySQL flavor) streams its whole binlog at every connect. Skipped
// transactions move nothing: the start set already holds them, and the pipeline's position is
// rebuilt from that set plus the transactions delivered.
//
// MySQL: a GTID in the start set is covered, whatever the order.
//
// MariaDB: the start position holds one GTID per domain, the last one executed, and it covers
// every transaction of that domain streamed before it. Sequence numbers do not order them: with
// gtid_strict_mode off, a transaction after a failover may carry a lower number than the one
// before it. So a domain is skipped until the stream shows the resume GTID passed, and only
// evidence from the stream ends the skipping. MariaDB's dump (sql/sql_repl.cc) gives it:
//   - the resume GTID's own group, when a server streams it (one that ignores the position): it
//     is skipped and everything after it in that domain is new;
//   - a Gtid_list event naming the resume GTID: the one at the start of each binlog file holds
//     the binlog state before the file (the server starts at the file after the resume GTID
//     when that GTID is the last of its domain there), and the artificial one the server sends
//     when a domain reaches the slave's position lists the GTIDs it read in this dump;
//   - any artificial Gtid_list: only a server that processes the slave's position sends one,
//     and such a server skips every group the position covers itself, in every domain. When
//     the resume GTID is missing from its binlog and it starts at a later group, it sends that
//     group and the artificial Gtid_list right after the group's GTID event, before anything
//     of the group reaches the pipeline.
//
// One fallback keeps a domain from being skipped forever when its resume GTID never streams (a
// promoted replica without log_slave_updates has the position only in gtid_slave_pos, and the
// server then deletes the domain from the dump's position without sending a Gtid_list): a
// transaction with a sequence number above the resume GTID's is delivered. Erring that way
// risks a duplicate on a server that streams from the beginning with gtid_strict_mode off, never
// a loss.
//
// Not safe for concurrent use: the Reader's Run loop owns it, one per stream.
type startFilter struct {
	flavor gtid.Flavor
	start  gtid.Set
	// pending: MariaDB domains whose resume GTID has not been seen to pass.
	pending map[uint32]mysql.MariadbGTID
	// last and lastSkip remember the decision for the transaction whose pieces are coming out.
	last     string
	lastSkip bool
	// skipped counts whole transactions skipped.
	skipped int
}

func newStartFilter(start gtid.Set) *startFilter {
	f := &startFilter{flavor: start.Flavor(), start: start}
	if start.Flavor() == gtid.MariaDB {
		ps := start.Positions()
		f.pending = make(map[uint32]mysql.MariadbGTID, len(ps))
		for _, p := range ps {
			if p.Seq > 0 { // seq 0: the domain's beginning, nothing covered
				f.pending[p.Domain] = mysql.MariadbGTID{DomainID: p.Domain, ServerID: p.Server, SequenceNumber: p.Seq}
			}
		}
	}
	return f
}

// observe takes the stream's evidence from one event, before the Assembler sees it.
func (f *startFilter) observe(ev *replication.BinlogEvent) {
	gl, ok := ev.Event.(*replication.MariadbGTIDListEvent)
	if !ok || len(f.pending) == 0 {
		return
	}
	if ev.Header != nil && ev.Header.Flags&logEventArtificial != 0 {
		clear(f.pending)
		return
	}
	for _, g := range gl.GTIDs {
		if p, ok := f.pending[g.DomainID]; ok && p == g {
			delete(f.pending, g.DomainID)
		}
	}
}

// covered reports whether txn (or the transaction a piece belongs to) is covered by the start
// position and must not be delivered, and counts the transactions it skips. It returns an error
// for a GTID it cannot parse.
func (f *startFilter) covered(txn *Txn) (bool, error) {
	if txn.GTID == "" { // anonymous: no position to compare
		return false, nil
	}
	if txn.GTID != f.last {
		skip, err := f.decide(txn.GTID)
		if err != nil {
			return false, err
		}
		f.last, f.lastSkip = txn.GTID, skip
	}
	if f.lastSkip && !txn.Partial {
		f.skipped++
	}
	return f.lastSkip, nil
}

// decide is covered's rule for the first event batch of one transaction.
func (f *startFilter) decide(g string) (bool, error) {
	if f.flavor == gtid.MySQL {
		in, err := f.start.ContainsGTID(g)
		if err != nil {
			return false, fmt.Errorf("binlog transaction: %w", err)
		}
		return in, nil
	}
	if len(f.pending) == 0 {
		return false, nil
	}
	mg, err := mysql.ParseMariadbGTID(g)
	if err != nil {
		return false, fmt.Errorf("binlog transaction %q: %w", g, err)
	}
	p, ok := f.pending[mg.DomainID]
	switch {
	case !ok:
		return false, nil
	case *mg == p:
		delete(f.pending, mg.DomainID) // everything after it in this domain is new
		return true, nil
	case mg.SequenceNumber > p.SequenceNumber:
		// The fallback above: a higher number is not shown to precede the resume GTID.
		return false, nil
	default:
		return true, nil // streamed before the resume GTID
	}
}
