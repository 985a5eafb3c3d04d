package main

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is 100 on every Linux
// architecture Go supports; reading it would need cgo (sysconf).
const clockTicks = 100

// procCPU returns the CPU time (user + system) a process has used, from /proc/<pid>/stat. It does
// not block. It fails when the process is gone or /proc is not Linux's.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may contain spaces and parentheses: split after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// memInfo is a process's resident memory now and at its peak.
type memInfo struct {
	RSS, HWM uint64 // bytes
}

// procMem reads VmRSS and VmHWM from /proc/<pid>/status. It does not block.
func procMem(pid int) (memInfo, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memInfo{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	var m memInfo
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest) // "12345 kB"
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return memInfo{}, fmt.Errorf("parse /proc/%d/status %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
	}
	return m, nil
}

// selfCPU is the harness process's own CPU time (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mariadbPID reads the server's pid file (mysqld.pid in its directory).
func mariadbPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "mysqld.pid"))
	if err != nil {
		return 0, fmt.Errorf("read MariaDB pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse MariaDB pid file: %w", err)
	}
	return pid, nil
}

// rssSampler samples a process's VmRSS at a fixed period on its own goroutine.
type rssSampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []uint64
}

// sampleRSS starts sampling pid every period until Stop. Safe for concurrent use.
func sampleRSS(pid int, period time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			if m, err := procMem(pid); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, m.RSS)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the samples (bytes). It blocks until the sampler goroutine ended.
func (s *rssSampler) Stop() []uint64 {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

func medianU64(v []uint64) uint64 {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	return c[len(c)/2]
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// questions reads the server's Questions counter (statements clients sent). The SHOW statement
// itself is counted in the value it returns.
func questions(ctx context.Context, db *sql.DB) (int64, error) {
	var name string
	var v int64
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
		return 0, fmt.Errorf("read Questions: %w", err)
	}
	return v, nil
}

// LatencyStats summarizes one run's latencies in milliseconds.
type LatencyStats struct {
	Count   int `json:"count"`   // messages with a latency
	Missing int `json:"missing"` // committed but not received before the deadline
	// Early counts messages received before the generator saw its COMMIT return: MariaDB hands
	// the binlog to replicas before it finishes the engine commit and answers the client. They
	// count as 0 ms; EarliestMS is the most negative raw value.
	Early      int     `json:"early"`
	EarliestMS float64 `json:"earliest_ms"`
	MeanMS     float64 `json:"mean_ms"`
	P50MS      float64 `json:"p50_ms"`
	P90MS      float64 `json:"p90_ms"`
	P99MS      float64 `json:"p99_ms"`
	P999MS     float64 `json:"p99_9_ms"`
	MaxMS      float64 `json:"max_ms"`
	// Curve is the latency at percentiles 0,1,…,99 then 99.5, 99.9, 99.99 and 100, for plots.
	Curve []CurvePoint `json:"curve"`
}

// CurvePoint is one point of a percentile curve.
type CurvePoint struct {
	Percentile float64 `json:"p"`
	MS         float64 `json:"ms"`
}

// percentile returns the nearest-rank percentile p (0..100) of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon keeps float error (99.9/100*1000 = 999.0000000000001) from skipping a rank.
	r := int(math.Ceil(p*float64(len(sorted))/100-1e-9)) - 1
	r = max(0, min(r, len(sorted)-1))
	return sorted[r]
}

// latencyStats summarizes latencies (ms, none negative). It sorts ms in place.
func latencyStats(ms []float64, missing, early int, earliest float64) *LatencyStats {
	slices.Sort(ms)
	st := &LatencyStats{Count: len(ms), Missing: missing, Early: early, EarliestMS: earliest}
	if len(ms) == 0 {
		return st
	}
	var sum float64
	for _, v := range ms {
		sum += v
	}
	st.MeanMS = sum / float64(len(ms))
	st.P50MS = percentile(ms, 50)
	st.P90MS = percentile(ms, 90)
	st.P99MS = percentile(ms, 99)
	st.P999MS = percentile(ms, 99.9)
	st.MaxMS = ms[len(ms)-1]
	for p := 0; p < 100; p++ {
		st.Curve = append(st.Curve, CurvePoint{float64(p), percentile(ms, float64(p))})
	}
	for _, p := range []float64{99.5, 99.9, 99.99, 100} {
		st.Curve = append(st.Curve, CurvePoint{p, percentile(ms, p)})
	}
	return st
}

// window measures one steady-state interval: a process's CPU and RSS, MariaDB's CPU and the
// statements clients sent. Create it with openWindow, finish it with close.
type window struct {
	start        time.Time
	pid          int // 0: no process of our own to measure (the baseline runs in the harness)
	dbPID        int
	cpu0, dbCPU0 time.Duration
	q0           int64
	sampler      *rssSampler
}

// windowResult is what a window measured.
type windowResult struct {
	Wall         time.Duration
	CPUPercent   float64 // of one core; 0 without pid
	DBCPUPercent float64
	Questions    int64 // statements clients sent in the window, excluding the harness's own SHOW
	RSSMedian    uint64
	RSSMax       uint64
	HWM          uint64
}

func openWindow(ctx context.Context, db *sql.DB, pid, dbPID int) (*window, error) {
	w := &window{pid: pid, dbPID: dbPID}
	var err error
	if w.q0, err = questions(ctx, db); err != nil {
		return nil, err
	}
	if pid != 0 {
		if w.cpu0, err = procCPU(pid); err != nil {
			return nil, err
		}
		w.sampler = sampleRSS(pid, 250*time.Millisecond)
	}
	if dbPID != 0 {
		w.dbCPU0, _ = procCPU(dbPID)
	}
	w.start = time.Now()
	return w, nil
}

func (w *window) close(ctx context.Context, db *sql.DB) (windowResult, error) {
	r := windowResult{Wall: time.Since(w.start)}
	secs := r.Wall.Seconds()
	if w.pid != 0 {
		samples := w.sampler.Stop()
		cpu, err := procCPU(w.pid)
		if err != nil {
			return r, err
		}
		r.CPUPercent = 100 * (cpu - w.cpu0).Seconds() / secs
		r.RSSMedian = medianU64(samples)
		if len(samples) > 0 {
			r.RSSMax = slices.Max(samples)
		}
		if m, err := procMem(w.pid); err == nil {
			r.HWM = m.HWM
		}
	}
	if w.dbPID != 0 {
		if c, err := procCPU(w.dbPID); err == nil {
			r.DBCPUPercent = 100 * (c - w.dbCPU0).Seconds() / secs
		}
	}
	q1, err := questions(ctx, db)
	if err != nil {
		return r, err
	}
	r.Questions = q1 - w.q0 - 1 // the closing SHOW counts itself
	return r, nil
}
