package binlog

import (
	"fmt"
	"math"
	"testing"
)

func TestMariadbGTIDFormat(t *testing.T) {
	for _, g := range [][3]uint64{{0, 1, 1}, {10, 2, 12345}, {math.MaxUint32, math.MaxUint32, math.MaxUint64}} {
		want := fmt.Sprintf("%d-%d-%d", g[0], g[1], g[2])
		if got := mariadbGTID(uint32(g[0]), uint32(g[1]), g[2]); got != want {
			t.Errorf("mariadbGTID%v = %q, want %q", g, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = mariadbGTID(0, 1, 123456789) }); n > 1 {
		t.Errorf("%v allocations, want 1", n)
	}
}
