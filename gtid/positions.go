package gtid

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
	if len(s.ma) == 0 {
		return nil
	}
	out := make([]Position, 0, len(s.ma))
	for _, d := range sortedDomains(s.ma) {
		out = append(out, s.ma[d])
	}
	return out
}

// Position returns the position of one domain of a MariaDB set, and whether the set has the
// domain. It is false for a MySQL set and the zero Set. Pure.
func (s Set) Position(domain uint32) (Position, bool) {
	p, ok := s.ma[domain]
	return p, ok
}
