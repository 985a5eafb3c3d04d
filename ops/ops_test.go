package ops

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

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

func newOps(r Relay) *Ops {
	cfg := &config.Config{Sinks: map[string]config.Sink{"k": {Type: "kafka"}, "r": {Type: "rocketmq"}, "x": {Type: "kafka"}}}
	return New(Config{
		Config:  cfg,
		Metrics: metrics.New(metrics.Options{}),
		Sinks:   map[string]sink.Sink{"k": probed{}, "r": probed{err: errors.New("refused")}, "x": unprobed{}},
		Started: time.Unix(1700000000, 0),
		Version: "v-test",
	}, r)
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
	o.probeSinks(context.Background())
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
