package binlog

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outboxd/outboxd/gtid"
)

// nativeSet builds go-mysql's form of s for BinlogSyncer.StartSyncGTID, from gtid's own structure
// rather than go-mysql's parser (which sorts and checks differently; see package gtid). It returns
// a new set each call, because the syncer mutates the set it is given as it streams, and nil for
// the zero Set. Pure.
func nativeSet(s gtid.Set) mysql.GTIDSet {
	switch s.Flavor() {
	case gtid.MySQL:
		n := mysql.NewMysqlGTIDSet()
		for _, src := range s.Sources() {
			if n[src.UUID] == nil {
				n[src.UUID] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			ivs := make(mysql.IntervalSlice, len(src.Intervals))
			for i, iv := range src.Intervals {
				ivs[i] = mysql.Interval{Start: iv.Start, Stop: iv.Stop}
			}
			n[src.UUID][mysql.NewTag(src.Tag)] = ivs
		}
		return &n
	case gtid.MariaDB:
		n := &mysql.MariadbGTIDSet{Sets: map[uint32]*mysql.MariadbGTID{}}
		for _, p := range s.Positions() {
			// go-mysql prints the GTID 0-0-0 as "" and so would send a malformed position such
			// as ",1-2-3". Position 0 of domain 0 means "from the domain's beginning", which is
			// also what the server does for a domain the position omits.
			if p == (gtid.Position{}) {
				continue
			}
			n.Sets[p.Domain] = &mysql.MariadbGTID{DomainID: p.Domain, ServerID: p.Server, SequenceNumber: p.Seq}
		}
		return n
	}
	return nil
}
