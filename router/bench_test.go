package router

import "testing"

// BenchmarkRoute is the per-event routing of a catch-up: a literal topic, the base headers, no
// headers column. go test ./router -run '^$' -bench Route -benchmem
func BenchmarkRoute(b *testing.B) {
	r := newRouter(b, `routes:
  - sink: main
    topic: "bench.catchup"
`)
	t, ev := txn(), event()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := r.RouteIndexed(t, ev); err != nil {
			b.Fatal(err)
		}
	}
}
