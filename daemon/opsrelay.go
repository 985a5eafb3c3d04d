package daemon

import (
	"database/sql"

	"github.com/outboxd/outboxd/admin"
	"github.com/outboxd/outboxd/metrics"
	"github.com/outboxd/outboxd/ops"
	"github.com/outboxd/outboxd/pipeline"
)

// opsRelay is what ops reads of the relay (ops.Relay). Safe for concurrent use.
type opsRelay struct{ r *relay }

var _ ops.Relay = opsRelay{}

func (v opsRelay) Leading() bool                { return v.r.role.leading() }
func (v opsRelay) Source() (string, *sql.DB)    { return v.r.src.Current() }
func (v opsRelay) Pipeline() *pipeline.Pipeline { return v.r.pl.Load() }
func (v opsRelay) HA() admin.HA                 { return v.r.role.status() }
func (v opsRelay) Saved() ops.Saved             { return v.r.saver.state() }

// setPipeline switches the status and gauges to a new session's pipeline.
func (r *relay) setPipeline(pl *pipeline.Pipeline) {
	r.pl.Store(pl)
	r.m.SetPipeline(pl)
}

// clearPipeline detaches the last session's pipeline when a term as leader ends: a standby
// reports nothing in flight and nothing behind.
func (r *relay) clearPipeline() {
	r.pl.Store(nil)
	r.m.SetPipeline(nil)
	r.m.SetBehind(metrics.Behind{})
}
