package ops

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/checkpoint"
	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/pipeline"
	"github.com/outboxd/outboxd/sink"
)

// fakeRelay is a relay without a server: a role, a source address and a saved checkpoint.
type fakeRelay struct {
	leading bool
	ha      admin.HA
	saved   Saved
}

func (f fakeRelay) Leading() bool                { return f.leading }
func (f fakeRelay) Source() (string, *sql.DB)    { return "db1:3306", nil }
func (f fakeRelay) Pipeline() *pipeline.Pipeline { return nil }
func (f fakeRelay) Saved() Saved                 { return f.saved }
func (f fakeRelay) HA() admin.HA                 { return f.ha }

// probed is a sink whose probe answers err.
type probed struct{ err error }

func (probed) Send(context.Context, []*sink.Message) error { return nil }
func (probed) Close() error                                { return nil }
func (p probed) Check(context.Context, []string) error     { return p.err }

// unprobed is a sink that cannot be probed.
type unprobed struct{}

func (unprobed) Send(context.Context, []*sink.Message) error { return nil }
func (unprobed) Close() error                                { return nil }

// newOps is ops over the relay r, as Start leaves it (without the loops).
func newOps(r Relay) *Ops {
	o := newStarting()
	o.run.Store(&Running{Relay: r, Sinks: map[string]sink.Sink{"k": probed{}, "r": probed{err: errors.New("refused")}, "x": unprobed{}}})
	return o
}

// newStarting is ops before the relay runs.
func newStarting() *Ops {
	cfg := &config.Config{Sinks: map[string]config.Sink{"k": {Type: "kafka"}, "r": {Type: "rocketmq"}, "x": {Type: "kafka"}}}
	cfg.Source.Addr = "db1:3306"
	return New(Config{
		Config:  cfg,
		Metrics: metrics.New(metrics.Options{}),
		Started: time.Unix(1700000000, 0),
		Version: "v-test",
	})
}

func TestReadyNamesWhatIsNotReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		relay fakeRelay
		want  []string
	}{
		{"leader without a stream", fakeRelay{leading: true, ha: admin.HA{Role: "leader"}},
			[]string{"source db1:3306: binlog stream not connected"}},
		{"standby that cannot wait", fakeRelay{ha: admin.HA{Role: "standby", WaitError: "writer away"}},
			[]string{"leader lock: cannot wait for it: writer away"}},
		{"starting", fakeRelay{ha: admin.HA{Role: "starting"}}, []string{"role starting: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := append(tc.want, "sink r: unreachable: refused", "sink x: not probed yet")
			if got := newOps(tc.relay).ready(context.Background()); !slices.Equal(got, want) {
				t.Errorf("ready() = %q, want %q", got, want)
			}
		})
	}
}

func TestRoleIsEmptyWhileStarting(t *testing.T) {
	if got := newOps(fakeRelay{ha: admin.HA{Role: "starting"}}).role(); got != "" {
		t.Errorf("role() = %q while starting, want none", got)
	}
	if got := newOps(fakeRelay{ha: admin.HA{Role: "standby"}}).role(); got != "standby" {
		t.Errorf("role() = %q, want standby", got)
	}
}

func TestStatusReportsSavedCheckpointAndSinks(t *testing.T) {
	failing := time.Unix(1700000100, 0)
	r := fakeRelay{ha: admin.HA{Role: "leader"}, saved: Saved{
		Last: checkpoint.Checkpoint{GTIDSet: "0-1-42"}, OK: true, FailingSince: failing, Err: errors.New("disk full"),
	}}
	o := newOps(r)
	o.ready(context.Background()) // probes
	st := o.status(context.Background())
	if st.Version != "v-test" || st.Source.Addr != "db1:3306" || st.HA.Role != "leader" {
		t.Errorf("status version, source, role = %q, %q, %q", st.Version, st.Source.Addr, st.HA.Role)
	}
	if st.CheckpointGTIDSet != "0-1-42" || st.CheckpointSaveError != "disk full" || !st.CheckpointFailingSince.Equal(failing) {
		t.Errorf("status checkpoint = %q, %q, %v", st.CheckpointGTIDSet, st.CheckpointSaveError, st.CheckpointFailingSince)
	}
	if s := st.Sinks["r"]; !s.Known || s.Up || s.Error != "refused" || s.Type != "rocketmq" {
		t.Errorf("status sink r = %+v", s)
	}
	if s := st.Sinks["x"]; s.Known || s.Type != "kafka" {
		t.Errorf("status sink x (never probed) = %+v", s)
	}
	if st.ReadGTIDSet != "" || st.InFlight.Events != 0 {
		t.Errorf("status without a pipeline reports %q, %d in flight", st.ReadGTIDSet, st.InFlight.Events)
	}
}

func TestReconcileHostCheckpointed(t *testing.T) {
	commit := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		saved Saved
		ok    bool
	}{
		{Saved{}, false},
		{Saved{OK: true}, false}, // a checkpoint without a transaction's commit time
		{Saved{OK: true, Last: checkpoint.Checkpoint{CommitTime: commit}}, true},
	} {
		got, ok := reconcileHost{fakeRelay{saved: tc.saved}}.Checkpointed()
		if ok != tc.ok || ok && !got.Equal(commit) {
			t.Errorf("Checkpointed() of %+v = %v, %v", tc.saved, got, ok)
		}
	}
}

// Before the relay runs, /readyz and /status both name the start-up step and what blocks it,
// and the source's last error shows in /status.
func TestStartingReportsTheStep(t *testing.T) {
	o := newStarting()
	o.Step("connecting to source db1:3306")
	if got := o.ready(context.Background()); !slices.Equal(got, []string{"starting: connecting to source db1:3306"}) {
		t.Errorf("ready() = %q", got)
	}
	refused := errors.New("connection refused")
	o.Blocked(refused)
	o.m.SourceConnected(false, refused)
	got := o.ready(context.Background())
	if len(got) != 1 || !strings.HasPrefix(got[0], "starting: connecting to source db1:3306: connection refused (retrying since ") {
		t.Errorf("ready() while blocked = %q", got)
	}
	st := o.status(context.Background())
	if st.Ready || !slices.Equal(st.NotReady, got) {
		t.Errorf("status ready %v, not_ready %q; want /readyz's %q", st.Ready, st.NotReady, got)
	}
	if st.HA.Role != "starting" || st.Source.Addr != "db1:3306" || st.Source.Connected || st.Source.LastError != "connection refused" {
		t.Errorf("status while starting: ha %+v, source %+v", st.HA, st.Source)
	}
	if o.role() != "" {
		t.Errorf("role() = %q while starting", o.role())
	}
	o.Step("opening the sinks")
	if got := o.ready(context.Background()); !slices.Equal(got, []string{"starting: opening the sinks"}) {
		t.Errorf("ready() after the next step = %q", got)
	}
}

// /status carries each sink's own /readyz entries, so `outboxd status` cannot call a sink up
// that /readyz calls not ready.
func TestStatusSinkNotReadyMatchesReadyz(t *testing.T) {
	o := newOps(fakeRelay{leading: true, ha: admin.HA{Role: "leader"}})
	ready := o.ready(context.Background())
	st := o.status(context.Background())
	if !slices.Equal(st.NotReady, ready) {
		t.Errorf("status not_ready %q, /readyz %q", st.NotReady, ready)
	}
	if got := st.Sinks["r"].NotReady; !slices.Equal(got, []string{"sink r: unreachable: refused"}) {
		t.Errorf("sink r not_ready = %q", got)
	}
	if got := st.Sinks["k"].NotReady; len(got) != 0 {
		t.Errorf("sink k (up) not_ready = %q", got)
	}
}

// A sink found down is logged once at warn, its recovery once at info; a sink first seen up
// and a state that did not change log nothing.
func TestSinkLogOnceEachWay(t *testing.T) {
	var buf strings.Builder
	log := zerolog.New(&buf)
	l := sinkLog{}
	l.update(log, map[string]metrics.SinkState{"main": {Error: "dial refused"}, "ok": {Up: true}})
	l.update(log, map[string]metrics.SinkState{"main": {Error: "dial refused"}, "ok": {Up: true}})
	l.update(log, map[string]metrics.SinkState{"main": {Up: true}, "ok": {Up: true}})
	l.update(log, map[string]metrics.SinkState{"main": {Up: true}, "ok": {Up: true}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"warn","sink":"main","error":"dial refused"`) ||
		!strings.Contains(lines[1], `"level":"info","sink":"main","message":"sink reachable again"`) {
		t.Errorf("log:\n%s", buf.String())
	}
}
