package gtid

import "testing"

// BenchmarkAddMariaDB is the tracker's fold of one acknowledged MariaDB transaction into the
// checkpoint's set: once per transaction, so 1-row catch-ups pay it per event.
// go test ./gtid -run '^$' -bench Add -benchmem
func BenchmarkAddMariaDB(b *testing.B) {
	s := Empty(MariaDB)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Add("0-1-123456789"); err != nil {
			b.Fatal(err)
		}
	}
}
