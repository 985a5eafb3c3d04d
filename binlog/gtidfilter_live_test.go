package binlog

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// The start filter against MariaDB 10.11's real streams: the server honouring the position (its
// Gtid_list events, the artificial one, a position at a binlog file's start, several domains)
// skips nothing, and the same start set over a stream from the server's very beginning (what
// a server that ignores the position sends) delivers exactly the same transactions.
func TestLiveMariaDBStartFilter(t *testing.T) {
	s := mariadb.StartT(t, mariadb.Options{})
	ctx := t.Context()
	db, err := s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec(t, db, outboxDDL)
	n := 0
	insert := func(db *sql.DB) string {
		n++
		exec(t, db, fmt.Sprintf(`INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES ('e%d','k','t','p')`, n))
		return fmt.Sprintf("e%d", n)
	}
	// Domain 1 from its own connection: a pool's session variables would not stick.
	d1, err := s.DB(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d1.SetMaxOpenConns(1)
	exec(t, d1, "SET SESSION gtid_domain_id = 1")

	insert(db)
	insert(db)
	insert(d1)
	mid := pos(t, db) // inside the first binlog file, both domains
	insert(db)
	insert(d1)
	exec(t, db, "FLUSH BINARY LOGS")
	boundary := pos(t, db) // the last GTIDs before the second file
	insert(db)
	insert(d1)
	insert(db)
	last := pos(t, db)

	empty := gtid.Empty(gtid.MariaDB)
	for _, c := range []struct {
		name  string
		start gtid.Set
		want  []string
	}{
		{"mid-file", mid, []string{"e4", "e5", "e6", "e7", "e8"}},
		{"file boundary", boundary, []string{"e6", "e7", "e8"}},
		{"caught up", last, nil},
	} {
		for _, ignoring := range []bool{false, true} {
			name := c.name + ", server honours"
			dump := c.start
			if ignoring {
				name, dump = c.name+", server streams from the beginning", empty
			}
			t.Run(name, func(t *testing.T) {
				m := metrics.New(metrics.Options{})
				lr := startReaderDump(t, s, c.start, dump, func(cfg *Config) { cfg.Metrics = m })
				var ids []string
				for _, x := range lr.recv(t, len(c.want)) {
					for _, e := range x.Events {
						ids = append(ids, string(e.EventID.Bytes))
					}
				}
				lr.expectNone(t, 700*time.Millisecond)
				lr.stop(t)
				if fmt.Sprint(ids) != fmt.Sprint(c.want) {
					t.Errorf("delivered %v, want %v", ids, c.want)
				}
				skipped := counterValue(t, m, "outboxd_transactions_skipped_total")
				// CREATE DATABASE, CREATE TABLE and every insert before the start stream again.
				if wantSkipped := float64(n + 2 - len(c.want)); ignoring && skipped != wantSkipped {
					t.Errorf("skipped %v, want %v", skipped, wantSkipped)
				} else if !ignoring && skipped != 0 {
					t.Errorf("skipped %v from a server that honours the position", skipped)
				}
			})
		}
	}
}

func counterValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.Metric) == 1 {
			return metricValue(f.Metric[0])
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func metricValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
