package binlog

import (
	"fmt"
	"testing"
)

// Events cut from one block never overlap: filling each transaction's slice, then every
// earlier one still holds its own events; slices grow in place while they are the block's last.
func TestEventSlabKeepsTransactionsApart(t *testing.T) {
	var s eventSlab
	var txns [][]Event
	fill := func(cur []Event, txn, n int) []Event {
		cur = s.grow(cur, n)
		if cap(cur)-len(cur) < n {
			t.Fatalf("grow(%d) left room for %d", n, cap(cur)-len(cur))
		}
		for range n {
			cur = append(cur, Event{ID: fmt.Sprintf("%d/%d", txn, len(cur))})
		}
		return cur
	}
	// 1-row transactions, 100-row ones in two rows events, one that outgrows half a block,
	// and 1-row ones again: across several blocks.
	sizes := [][]int{{1}, {1}, {50, 50}, {50, 50}, {1}, {200, 100}, {50, 50}, {300, 300, 300}, {1}, {100, 100}, {1}}
	for range 4 {
		for _, rows := range sizes {
			var cur []Event
			for _, n := range rows {
				cur = fill(cur, len(txns), n)
			}
			txns = append(txns, cur)
		}
	}
	for i, cur := range txns {
		for j, ev := range cur {
			if want := fmt.Sprintf("%d/%d", i, j); ev.ID != want {
				t.Fatalf("transaction %d event %d is %q, want %q", i, j, ev.ID, want)
			}
		}
		if cap(cur) != len(cur) && len(cur) <= slabEvents/2 {
			t.Errorf("transaction %d: cap %d beyond its %d events: an append could reach the next one", i, cap(cur), len(cur))
		}
	}
}

func TestEventSlabGrowsInPlace(t *testing.T) {
	var s eventSlab
	a := s.grow(nil, 50)
	a = append(a, make([]Event, 50)...)
	b := s.grow(a, 50)
	if &b[0] != &a[0] {
		t.Fatal("the block's last slice was copied, not extended in place")
	}
	c := s.grow(nil, 1)
	c = append(c, Event{})
	if d := s.grow(b[:100:100], 10); &d[0] == &b[0] {
		t.Fatal("a slice that is no longer the block's last was extended in place over the next one")
	}
}
