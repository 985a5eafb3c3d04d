package kafka

import "testing"

func TestBufClass(t *testing.T) {
	for _, tc := range []struct {
		size, class int
		ok          bool
	}{
		{0, 0, true}, {1, 0, true}, {1024, 0, true}, {1025, 1, true}, {2048, 1, true},
		{4 << 20, 12, true}, {8 << 20, 13, true}, {8<<20 + 1, 0, false},
	} {
		c, ok := bufClass(tc.size)
		if ok != tc.ok || (ok && c != tc.class) {
			t.Errorf("bufClass(%d) = %d, %v; want %d, %v", tc.size, c, ok, tc.class, tc.ok)
		}
	}
}

// A recycled buffer comes back with the capacity asked for and its old bytes, which
// encodeBatch overwrites; buffers not of a class are never taken in.
func TestBufPoolRecycles(t *testing.T) {
	b := getBuf(10, 3000)
	if len(b) != 10 || cap(b) != 4096 {
		t.Fatalf("getBuf(10, 3000): len %d cap %d, want 10 and 4096", len(b), cap(b))
	}
	putBuf(make([]byte, 0, 3000)) // not a class's capacity: dropped
	for range 100 {
		c := getBuf(0, 4000)
		if cap(c) != 4096 {
			t.Fatalf("cap %d, want 4096", cap(c))
		}
		putBuf(c)
	}
	big := getBuf(0, 9<<20)
	if cap(big) != 9<<20 {
		t.Fatalf("above the classes: cap %d, want %d", cap(big), 9<<20)
	}
	putBuf(big) // ignored, must not panic
}
