package importpos

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestReadDebezium(t *testing.T) {
	for _, c := range []struct {
		file, connector string
		flavor          gtid.Flavor
		want            string
		partial         bool
	}{
		{"debezium-mysql.json", "", gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", false},
		{"debezium-mysql.json", "inventory-connector", gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", false},
		// Mid-transaction: gtids is the set before the partly emitted transaction, which is
		// sent again whole.
		{"debezium-mid-transaction.json", "", gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", true},
		// The offsets topic: the connector's last record wins, other connectors are ignored.
		{"debezium-offsets-topic.txt", "inventory-connector", gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7", false},
		{"debezium-offsets-topic.txt", "billing-connector", gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-2", false},
		{"debezium-mariadb.json", "", gtid.MariaDB, "0-1-42,1-1-7", false},
		// Kafka Connect's GET /connectors/<name>/offsets (KIP-875).
		{"debezium-connect-rest.json", "", gtid.MySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7", false},
	} {
		p, err := ReadDebezium(open(t, c.file), c.connector)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		s, err := p.Set(c.flavor)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if s.String() != c.want || (p.Partial != "") != c.partial || !p.Boundary {
			t.Errorf("%s %s: %s partial %q boundary %v, want %s partial %v", c.file, c.connector, s, p.Partial, p.Boundary, c.want, c.partial)
		}
	}
}

func TestReadDebeziumRefuses(t *testing.T) {
	for _, c := range []struct{ file, connector, want string }{
		{"debezium-offsets-topic.txt", "", "pass --connector"},
		{"debezium-offsets-topic.txt", "nope", `no offset record of connector "nope" (connectors found: billing-connector, inventory-connector)`},
		{"debezium-snapshot.json", "", "initial snapshot"},
		{"debezium-tombstone.txt", "", "tombstone"},
	} {
		_, err := ReadDebezium(open(t, c.file), c.connector)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.file, err, c.want)
		}
	}
	for _, in := range []string{"", "[1,2,3] {}", `"x"`, `{"foo":1}`, `["c",{"server":"s"}]`, `{"offsets":[]}`} {
		if _, err := ReadDebezium(strings.NewReader(in), ""); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}

func TestNoGTIDRefused(t *testing.T) {
	p, err := ReadDebezium(open(t, "debezium-no-gtids.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Set(gtid.MySQL)
	if !errors.Is(err, ErrNoGTID) || !strings.Contains(err.Error(), "gtid_mode=ON") || !strings.Contains(err.Error(), "--binlog-gtid-pos") ||
		!strings.Contains(err.Error(), `"mysql-bin.000003" offset 154`) {
		t.Fatalf("no gtids: %v", err)
	}
	p, err = ReadCanal(open(t, "canal-meta-no-gtid.dat"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = p.Set(gtid.MySQL); !errors.Is(err, ErrNoGTID) || !strings.Contains(err.Error(), "canal.instance.gtidon=true") {
		t.Fatalf("canal without gtid: %v", err)
	}
	// A Canal offset is a transaction's BEGIN or END event, not a boundary: BINLOG_GTID_POS
	// would not be exact there, so it is refused before any query.
	if _, err := FromBinlogOffset(t.Context(), nil, gtid.MariaDB, p); !errors.Is(err, ErrNoGTID) {
		t.Fatalf("canal with --binlog-gtid-pos: %v", err)
	}
	if _, err := FromBinlogOffset(t.Context(), nil, gtid.MySQL, Position{Tool: Debezium, File: "f", Pos: 4, Boundary: true}); err == nil || !strings.Contains(err.Error(), "MariaDB") {
		t.Fatalf("mysql with --binlog-gtid-pos: %v", err)
	}
}

func TestReadCanal(t *testing.T) {
	for _, c := range []struct{ file, client, want string }{
		{"canal-meta.dat", "", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-12"},
		{"canal-meta.dat", "1001", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-12"},
		{"canal-meta-two-clients.dat", "1002", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9"},
		{"canal-zk-cursor.json", "", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-12"},
	} {
		p, err := ReadCanal(open(t, c.file), c.client)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		s, err := p.Set(gtid.MySQL)
		if err != nil || s.String() != c.want || p.Boundary {
			t.Errorf("%s %s: %s %v boundary %v, want %s", c.file, c.client, s, err, p.Boundary, c.want)
		}
	}
	for _, c := range []struct{ file, client, want string }{
		{"canal-meta-two-clients.dat", "", "pass --client-id"},
		{"canal-meta.dat", "7", "no client 7"},
		{"canal-meta-no-cursor.dat", "", "acknowledged nothing"},
	} {
		if _, err := ReadCanal(open(t, c.file), c.client); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.file, err, c.want)
		}
	}
	if _, err := ReadCanal(strings.NewReader(`{"destination":"x"}`), ""); err == nil {
		t.Error("a file without clientDatas or postion was accepted")
	}
}

func TestFlavorMismatch(t *testing.T) {
	p, err := ReadDebezium(open(t, "debezium-mariadb.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Set(gtid.MySQL); err == nil || !strings.Contains(err.Error(), "source.flavor") {
		t.Fatalf("a MariaDB set under source.flavor mysql: %v", err)
	}
}

// The offsets topic's records: other connectors and non-Debezium keys are skipped, the last
// record of the connector wins, a tombstone after it is refused.
func TestReadDebeziumTopic(t *testing.T) {
	kv := func(k, v string) KeyValue {
		r := KeyValue{Key: []byte(k)}
		if v != "" {
			r.Value = []byte(v)
		}
		return r
	}
	recs := []KeyValue{
		kv(`["outbox",{"server":"shop"}]`, `{"file":"mysql-bin.000001","pos":4,"gtids":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3"}`),
		kv(`{"some":"other connector"}`, `{"x":1}`),
		kv(`["billing",{"server":"b"}]`, `{"file":"mysql-bin.000001","pos":9,"gtids":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9"}`),
		kv(`["outbox",{"server":"shop"}]`, `{"file":"mysql-bin.000001","pos":77,"gtids":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}`),
	}
	p, err := ReadDebeziumTopic(recs, "outbox")
	if err != nil || p.GTIDSet != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5" || p.Pos != 77 {
		t.Fatalf("%+v, %v", p, err)
	}
	if _, err := ReadDebeziumTopic(append(recs, kv(`["outbox",{"server":"shop"}]`, "")), "outbox"); err == nil || !strings.Contains(err.Error(), "tombstone") {
		t.Fatalf("tombstone: %v", err)
	}
	if _, err := ReadDebeziumTopic(recs, "nope"); err == nil || !strings.Contains(err.Error(), `no record of connector "nope"`) {
		t.Fatalf("missing connector: %v", err)
	}
	if _, err := ReadDebeziumTopic(recs, ""); err == nil {
		t.Fatal("no connector name accepted")
	}
}
