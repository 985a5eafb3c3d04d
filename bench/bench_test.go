package main

import (
	"encoding/json"
	"os"
	"testing"
)

func TestPayloadIsOneKiBOfJSON(t *testing.T) {
	for _, i := range []int{0, 7, 9999, 10000, 123456789} {
		p := payload(i)
		if len(p) != payloadBytes {
			t.Errorf("payload(%d) is %d bytes, want %d", i, len(p), payloadBytes)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			t.Errorf("payload(%d) is not JSON: %v", i, err)
		}
	}
}

func TestEventIDRoundTrip(t *testing.T) {
	w, i, ok := parseEventID("sk-", eventID("sk-", 3, 4711))
	if !ok || w != 3 || i != 4711 {
		t.Fatalf("parseEventID = %d, %d, %v", w, i, ok)
	}
	for _, bad := range []string{"sr-1-2", "sk-1", "sk-x-2", "sk-1-y"} {
		if _, _, ok := parseEventID("sk-", bad); ok {
			t.Errorf("parseEventID(%q) accepted", bad)
		}
	}
}

func TestLatencyStatsNearestRank(t *testing.T) {
	ms := make([]float64, 1000)
	for i := range ms {
		ms[i] = float64(1000 - i) // 1..1000, reversed
	}
	st := latencyStats(ms, 2, 1, -0.5)
	if st.P50MS != 500 || st.P99MS != 990 || st.P999MS != 999 || st.MaxMS != 1000 || st.Count != 1000 {
		t.Fatalf("stats = %+v", st)
	}
	if st.Missing != 2 || st.Early != 1 || st.EarliestMS != -0.5 {
		t.Fatalf("counts = %+v", st)
	}
}

func TestProcReadsOwnProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: the harness measures only on Linux")
	}
	x := 0
	for i := 0; i < 50_000_000; i++ { // burn some CPU so utime is above 0
		x += i
	}
	_ = x
	cpu, err := procCPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("procCPU = %v, %v", cpu, err)
	}
	m, err := procMem(os.Getpid())
	if err != nil || m.RSS == 0 || m.HWM < m.RSS {
		t.Fatalf("procMem = %+v, %v", m, err)
	}
}
