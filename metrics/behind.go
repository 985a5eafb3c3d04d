package metrics

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/gtid"
)

// CountBehind returns how many transactions server holds that acked does not: for MariaDB the
// sum over the server's domains of the sequence-number difference (a domain acked lacks counts
// from 0), for MySQL the size of server minus acked. It is cheap enough for a periodic sample,
// not for every event. Pure; safe for concurrent use. It errs only on a set it cannot read.
func CountBehind(server, acked gtid.Set) (int64, error) {
	if server.Flavor() != acked.Flavor() {
		return 0, fmt.Errorf("count transactions behind: server set is %s, acknowledged set is %s", server.Flavor(), acked.Flavor())
	}
	if server.Flavor() == gtid.MariaDB {
		s, err := mariaSeqs(server.String())
		if err != nil {
			return 0, err
		}
		a, err := mariaSeqs(acked.String())
		if err != nil {
			return 0, err
		}
		var n int64
		for d, seq := range s {
			if seq > a[d] {
				n += int64(seq - a[d])
			}
		}
		return n, nil
	}
	return countMySQL(server.Subtract(acked).String())
}

// mariaSeqs maps each domain of a MariaDB position ("0-1-42,1-2-7") to its sequence number.
func mariaSeqs(s string) (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("count transactions behind: %q is not domain-server-sequence", part)
		}
		d, err1 := strconv.ParseUint(f[0], 10, 32)
		seq, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("count transactions behind: %q is not domain-server-sequence", part)
		}
		out[uint32(d)] = seq
	}
	return out, nil
}

// countMySQL counts the GTIDs of a MySQL set in the server's notation
// ("uuid:1-5:7,\nuuid:tag:3-4").
func countMySQL(s string) (int64, error) {
	var n int64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		fields := strings.Split(part, ":")
		for _, f := range fields[1:] {
			if f == "" || f[0] < '0' || f[0] > '9' {
				continue // a tag
			}
			lo, hi, ok := strings.Cut(f, "-")
			a, err := strconv.ParseInt(lo, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("count transactions behind: interval %q in %q: %w", f, part, err)
			}
			b := a
			if ok {
				if b, err = strconv.ParseInt(hi, 10, 64); err != nil {
					return 0, fmt.Errorf("count transactions behind: interval %q in %q: %w", f, part, err)
				}
			}
			if b >= a {
				n += b - a + 1
			}
		}
	}
	return n, nil
}
