package binlog

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/gtid"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata golden files from the current implementation")

const (
	nu1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	nu2 = "57b70f4e-20c8-11ef-8d33-0242ac110002"
	nu3 = "f0000000-0000-0000-0000-000000000001"
)

// nativeCorpus: sets whose go-mysql form the dump request carries. The golden file holds what
// gtid.Set.Native produced for them before the conversion moved into binlog.
var nativeCorpus = []struct {
	flavor gtid.Flavor
	in     string
}{
	{gtid.MySQL, ""},
	{gtid.MySQL, nu1 + ":1"},
	{gtid.MySQL, nu1 + ":1-5:7"},
	{gtid.MySQL, nu1 + ":7:1-5:3-6:9-9"},
	{gtid.MySQL, nu2 + ":1-3," + nu1 + ":5"},
	{gtid.MySQL, nu1 + ":1-13:mytag:1-2," + nu2 + ":5"},
	{gtid.MySQL, nu1 + ":mytag:3"},
	{gtid.MySQL, nu1 + ":b:1," + nu1 + ":a:2," + nu1 + ":5," + nu3 + ":x:1-100:200"},
	{gtid.MySQL, nu1 + ":9223372036854775806"},
	{gtid.MySQL, nu1 + ":1-9223372036854775806," + nu2 + ":" + strings.Repeat("z", 32) + ":4"},
	{gtid.MariaDB, ""},
	{gtid.MariaDB, "0-1-42"},
	{gtid.MariaDB, "0-1-42,1-2-7"},
	{gtid.MariaDB, "10-1-5,2-1-7"},
	{gtid.MariaDB, "0-0-0"},
	{gtid.MariaDB, "0-0-0,10-1-5,2-1-7"},
	{gtid.MariaDB, "0-0-1"},
	{gtid.MariaDB, "0-2-0,3-0-0"},
	{gtid.MariaDB, "100-1-1,20-1-1,3-1-1,0-1-1"},
	{gtid.MariaDB, "4294967295-4294967295-18446744073709551615"},
}

type nativeGolden struct {
	Flavor gtid.Flavor `json:"flavor"`
	In     string      `json:"in"`
	String string      `json:"string"`
	Encode string      `json:"encode_hex"`
}

// TestNativeSetWireForm: the position the server receives is byte for byte what it was when
// gtid.Set built go-mysql's set itself, and go-mysql's text of it parses back to the set (less
// MariaDB's 0-0-0, which means the same as omitting domain 0).
func TestNativeSetWireForm(t *testing.T) {
	path := filepath.Join("testdata", "nativeset.golden.json")
	var got []nativeGolden
	for _, c := range nativeCorpus {
		s, err := gtid.Parse(c.flavor, c.in)
		if err != nil {
			t.Fatal(err)
		}
		n := nativeSet(s)
		got = append(got, nativeGolden{c.flavor, c.in, n.String(), hex.EncodeToString(n.Encode())})

		back, err := gtid.Parse(c.flavor, n.String())
		if err != nil {
			t.Fatalf("%s %q: go-mysql's text %q does not parse: %v", c.flavor, c.in, n.String(), err)
		}
		want := s
		if p, ok := s.Position(0); ok && p == (gtid.Position{}) {
			want = s.Subtract(mustParseSet(t, c.flavor, "0-0-0"))
		}
		if !back.Equal(want) {
			t.Errorf("%s %q: native text %q parses to %q", c.flavor, c.in, n.String(), back)
		}
	}
	if *updateGolden {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []nativeGolden
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Fatalf("golden has %d sets, corpus %d: run with -update only when the wire form is meant to change", len(want), len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s %q: native set\n got %q %s\nwant %q %s", want[i].Flavor, want[i].In, got[i].String, got[i].Encode, want[i].String, want[i].Encode)
		}
	}
}

func mustParseSet(t *testing.T, f gtid.Flavor, s string) gtid.Set {
	t.Helper()
	set, err := gtid.Parse(f, s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
