package gtid

import "github.com/go-mysql-org/go-mysql/mysql"

// Position is one MariaDB domain's position: the GTID "domain-server-seq" of the last
// transaction the set records in that domain.
type Position struct {
	Domain, Server uint32
	Seq            uint64
}

// String formats p as the server prints it, "domain-server-seq". Pure.
func (p Position) String() string { return FormatMariaDB(p.Domain, p.Server, p.Seq) }

// Positions returns a MariaDB set's per-domain positions in domain order, the order String
// prints them in. It is nil for a MySQL set, an empty set and the zero Set. The result shares no
// storage with s. Pure; safe for concurrent use with other reads of s.
func (s Set) Positions() []Position {
	m, ok := s.s.(*mysql.MariadbGTIDSet)
	if !ok || len(m.Sets) == 0 {
		return nil
	}
	out := make([]Position, 0, len(m.Sets))
	for _, d := range sortedDomains(m) {
		g := m.Sets[d]
		out = append(out, Position{Domain: g.DomainID, Server: g.ServerID, Seq: g.SequenceNumber})
	}
	return out
}

// Position returns the position of one domain of a MariaDB set, and whether the set has the
// domain. It is false for a MySQL set and the zero Set. Pure.
func (s Set) Position(domain uint32) (Position, bool) {
	m, ok := s.s.(*mysql.MariadbGTIDSet)
	if !ok {
		return Position{}, false
	}
	g, ok := m.Sets[domain]
	if !ok {
		return Position{}, false
	}
	return Position{Domain: g.DomainID, Server: g.ServerID, Seq: g.SequenceNumber}, true
}
