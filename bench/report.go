package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Results is everything one harness run measured; it is written as results.json.
type Results struct {
	Machine      Machine    `json:"machine"`
	Params       Params     `json:"params"`
	Workloads    []Workload `json:"workloads"`
	Ratios       []Ratio    `json:"ratios"`
	Errors       []string   `json:"errors,omitempty"`
	TotalSeconds float64    `json:"total_seconds"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc       int    `json:"nproc"`
	CPUModel    string `json:"cpu_model"`
	MemTotalMiB int    `json:"mem_total_mib"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	MariaDB     string `json:"mariadb_version"`
	Date        string `json:"date"`
	GitCommit   string `json:"git_commit"`
	GitDirty    bool   `json:"git_dirty"`
}

// Params are the flags the run used.
type Params struct {
	Rows          int      `json:"rows"`
	TxnSizes      []int    `json:"txn_sizes"`
	Steady        string   `json:"steady"`
	Rates         []int    `json:"rates"`
	BaselineRates []int    `json:"baseline_rates"`
	BaselineRows  int      `json:"baseline_rows"`
	BigRows       int      `json:"big_rows"`
	RMQRows       int      `json:"rocketmq_rows"`
	RMQRate       int      `json:"rocketmq_rate"`
	GenConns      int      `json:"gen_conns"`
	Reps          int      `json:"reps"`
	Steady1Rates  []int    `json:"steady1_rates"`
	PairedConns   int      `json:"steady1_paired_conns,omitempty"` // 0: no paired probe
	Only          []string `json:"only,omitempty"`
	OutboxdExtra  string   `json:"outboxd_extra,omitempty"`
	OutboxdBinary string   `json:"outboxd_binary"` // "built" or the -outboxd path
	PayloadBytes  int      `json:"payload_bytes"`
	DistinctKeys  int      `json:"distinct_keys"`
	Partitions    int      `json:"kafka_partitions"`
	RMQQueues     int      `json:"rocketmq_queues"`
}

// Workload is one measured row. Pointer fields are null when they do not apply.
type Workload struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Kind    string `json:"kind"`   // catchup | ceiling | floor | steady | memory
	System  string `json:"system"` // outboxd-kafka | outboxd-rocketmq | go-mysql | floor-<client> | poll-1s | poll-10ms
	Events  int    `json:"events"`
	TxnRows int    `json:"txn_rows"`

	TargetRate   float64  `json:"target_rate,omitempty"`
	Seconds      float64  `json:"seconds"`
	GenSeconds   float64  `json:"generate_seconds,omitempty"` // catch-up: time to write the rows
	EventsPerSec *float64 `json:"events_per_sec"`

	CPUSeconds *float64 `json:"cpu_seconds"`    // of the relay process (outboxd), or of go-mysql's process
	CPUPer100k *float64 `json:"cpu_s_per_100k"` // CPU seconds per 100,000 events
	CPUPercent *float64 `json:"cpu_percent"`    // of one core, steady runs

	Latency      *LatencyStats `json:"latency,omitempty"`
	RSSPeakMiB   *float64      `json:"rss_peak_mib"`   // VmHWM
	RSSSteadyMiB *float64      `json:"rss_steady_mib"` // median VmRSS over the window

	// Segments split the single-connection probe's latency along the path (stamps.go).
	Segments []Segment `json:"segments,omitempty"`

	DBQueriesPerSec  *float64 `json:"db_queries_per_sec"`  // Questions delta minus the generator's statements
	OwnQueriesPerSec *float64 `json:"own_queries_per_sec"` // the polling relay's own statement count
	DBCPUPercent     *float64 `json:"db_cpu_percent"`      // mariadbd, of one core
	DBCPUSeconds     *float64 `json:"db_cpu_seconds,omitempty"`
	// HarnessCPUPercent is this harness process (kfake or the RocketMQ test broker, the
	// consumers) during a catch-up, of one core: with outboxd's and MariaDB's it shows whether
	// the machine's cores were the bound.
	HarnessCPUPercent *float64 `json:"harness_cpu_percent,omitempty"`

	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// Ratio compares two workloads.
type Ratio struct {
	Name   string   `json:"name"`
	Value  *float64 `json:"value"`
	Detail string   `json:"detail"`
}

func fp(v float64) *float64 { return &v }

func (r *Results) find(id string) *Workload {
	for i := range r.Workloads {
		if r.Workloads[i].ID == id && r.Workloads[i].Error == "" {
			return &r.Workloads[i]
		}
	}
	return nil
}

// computeRatios fills r.Ratios from the workloads that succeeded.
func (r *Results) computeRatios() {
	r.Ratios = nil
	eps := func(w *Workload) float64 {
		if w == nil || w.EventsPerSec == nil {
			return 0
		}
		return *w.EventsPerSec
	}
	for _, n := range r.Params.TxnSizes {
		o, c := r.find(fmt.Sprintf("catchup-kafka-txn%d", n)), r.find(fmt.Sprintf("ceiling-txn%d", n))
		if eps(o) > 0 && eps(c) > 0 {
			r.Ratios = append(r.Ratios, Ratio{
				Name:   fmt.Sprintf("outboxd / ceiling, catch-up, %d-row txns", n),
				Value:  fp(eps(o) / eps(c)),
				Detail: fmt.Sprintf("%.0f vs %.0f events/s", eps(o), eps(c)),
			})
		}
	}
	if o, b := r.find("catchup-kafka-txn1"), r.find("catchup-poll-10ms"); eps(o) > 0 && eps(b) > 0 {
		r.Ratios = append(r.Ratios, Ratio{
			Name:   "outboxd / polling relay, catch-up throughput (1-row txns)",
			Value:  fp(eps(o) / eps(b)),
			Detail: fmt.Sprintf("%.0f vs %.0f events/s", eps(o), eps(b)),
		})
	}
	for _, rate := range []int{3000, 300} {
		o := r.find(fmt.Sprintf("steady-kafka-%d", rate))
		for _, sys := range []string{"poll-1s", "poll-10ms"} {
			b := r.find(fmt.Sprintf("steady-%s-%d", sys, rate))
			if o == nil || b == nil || o.Latency == nil || b.Latency == nil || o.Latency.P99MS <= 0 {
				continue
			}
			r.Ratios = append(r.Ratios, Ratio{
				Name:   fmt.Sprintf("%s p99 / outboxd p99 at %d/s", sys, rate),
				Value:  fp(b.Latency.P99MS / o.Latency.P99MS),
				Detail: fmt.Sprintf("%.1f ms vs %.1f ms", b.Latency.P99MS, o.Latency.P99MS),
			})
			if o.DBQueriesPerSec != nil && b.DBQueriesPerSec != nil {
				r.Ratios = append(r.Ratios, Ratio{
					Name:   fmt.Sprintf("DB queries/s at %d/s: %s vs outboxd", rate, sys),
					Detail: fmt.Sprintf("%.1f vs %.1f queries/s (generator's own INSERTs excluded)", *b.DBQueriesPerSec, *o.DBQueriesPerSec),
				})
			}
		}
	}
	r.floorRatios()
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// markdown renders the results as the README's Results section.
func (r *Results) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Run %s on %d × %s, %d MiB RAM, %s, %s, MariaDB %s, commit %s%s. Everything (MariaDB, kfake, the RocketMQ test broker, outboxd, the generators and consumers) shares this machine.\n\n",
		m.Date, m.NProc, m.CPUModel, m.MemTotalMiB, m.Kernel, m.GoVersion, m.MariaDB, short(m.GitCommit), map[bool]string{true: " (dirty)", false: ""}[m.GitDirty])
	fmt.Fprintf(&b, "Payloads %d B JSON, %d distinct keys, Kafka topics of %d partitions, RocketMQ topics of %d queues.\n\n",
		r.Params.PayloadBytes, r.Params.DistinctKeys, r.Params.Partitions, r.Params.RMQQueues)
	b.WriteString("| workload | events | events/s | CPU s/100k | CPU % | p50 ms | p99 ms | p99.9 ms | max ms | RSS MiB | DB queries/s | DB CPU % | broker+harness CPU % |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, w := range r.Workloads {
		if w.Error != "" {
			fmt.Fprintf(&b, "| %s | failed: %s |||||||||||\n", w.Name, oneLine(w.Error, 120))
			continue
		}
		var p50, p99, p999, pmax string
		if w.Latency != nil && w.Latency.Count > 0 {
			p50, p99, p999, pmax = ms(w.Latency.P50MS), ms(w.Latency.P99MS), ms(w.Latency.P999MS), ms(w.Latency.MaxMS)
		}
		rss := w.RSSPeakMiB
		rssNote := " (peak)"
		if w.RSSSteadyMiB != nil {
			rss, rssNote = w.RSSSteadyMiB, ""
		}
		rssS := num(rss, 0)
		if rssS != "" {
			rssS += rssNote
		}
		q := num(w.DBQueriesPerSec, 1)
		if w.OwnQueriesPerSec != nil {
			q = fmt.Sprintf("%s (own count %s)", q, num(w.OwnQueriesPerSec, 1))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			w.Name, w.Events, num(w.EventsPerSec, 0), num(w.CPUPer100k, 2), num(w.CPUPercent, 0),
			p50, p99, p999, pmax, rssS, q, num(w.DBCPUPercent, 0), num(w.HarnessCPUPercent, 0))
	}
	if len(r.Ratios) > 0 {
		b.WriteString("\n| comparison | ratio | figures |\n|---|---:|---|\n")
		for _, x := range r.Ratios {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", x.Name, num(x.Value, 2), x.Detail)
		}
	}
	r.floorMarkdown(&b)
	var notes []string
	for _, w := range r.Workloads {
		for _, n := range w.Notes {
			notes = append(notes, fmt.Sprintf("%s: %s", w.Name, n))
		}
	}
	b.WriteString("\nColumns: events/s is catch-up throughput (process start to the last message stored; exactly-once rows: to a " +
		"read_committed consumer receiving the checkpoint committed with the last events) or the achieved steady rate; " +
		"CPU is the relay process's own (/proc utime+stime; for go-mysql the harness process, which runs nothing else then; " +
		"not measured for the polling relay, which runs inside the harness); latency is COMMIT returning to the Kafka consumer " +
		"receiving the message (read_uncommitted, franz-go's default; exactly-once rows: read_committed, so after the Kafka " +
		"transaction's commit; RocketMQ: to the test broker storing it); RSS is VmHWM for catch-up rows and the median VmRSS " +
		"for steady rows; DB queries/s is the server's Questions delta minus the generator's own INSERTs; DB CPU is mariadbd's.\n")
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	if len(r.Errors) > 0 {
		b.WriteString("\nErrors:\n")
		for _, e := range r.Errors {
			b.WriteString("- " + oneLine(e, 300) + "\n")
		}
	}
	fmt.Fprintf(&b, "\nHarness wall time: %.0f s.\n", r.TotalSeconds)
	return b.String()
}

func num(v *float64, prec int) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// machineInfo collects facts about the machine; missing facts stay empty.
func machineInfo(ctx context.Context, repo string, db *sql.DB) Machine {
	m := Machine{NProc: runtime.NumCPU(), Date: time.Now().UTC().Format(time.RFC3339)}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				m.MemTotalMiB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, "go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
	} else {
		m.GoVersion = runtime.Version()
	}
	git := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = repo
		out, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	m.GitCommit = git("rev-parse", "HEAD")
	m.GitDirty = git("status", "--porcelain", "--untracked-files=no") != ""
	if db != nil {
		_ = db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&m.MariaDB)
	}
	return m
}

// writeResults writes results.json and results.md into dir.
func writeResults(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "results.json"), r); err != nil {
		return fmt.Errorf("write results.json: %w", err)
	}
	var md bytes.Buffer
	md.WriteString(r.markdown())
	if err := os.WriteFile(filepath.Join(dir, "results.md"), md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write results.md: %w", err)
	}
	return nil
}
