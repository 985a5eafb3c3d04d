package config

import (
	"net"
	"regexp"
	"time"
)

// checkpointNameRe is the MySQL store's row name: printable, no quotes or spaces, so it is safe
// in logs, SQL literals an operator copies, and a lock name derived from it later.
var checkpointNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)

func (c *Config) validateCheckpoint(p *problems) {
	cp := c.Checkpoint
	switch cp.Store {
	case CheckpointStoreFile, "": // "" in a Config built in code
		if cp.Path == "" {
			p.add("checkpoint.path", "is required; set the checkpoint file, such as %s", DefaultCheckpointPath)
		}
		for field, v := range map[string]string{"checkpoint.table": cp.Table, "checkpoint.name": cp.Name, "checkpoint.writer_addr": cp.WriterAddr} {
			if v != "" {
				p.add(field, "is only for store: mysql; remove it or set checkpoint.store: mysql")
			}
		}
	case CheckpointStoreMySQL:
		if cp.Path != "" {
			p.add("checkpoint.path", "is only for store: file; the mysql store keeps the checkpoint in checkpoint.table (move a file with `outboxd checkpoint migrate --from-file PATH`)")
		}
		if !validTableName(cp.Table) {
			p.add("checkpoint.table", "%q is not \"schema.table\", such as %s", cp.Table, DefaultCheckpointTable)
		} else if _, ok := c.TableByName(cp.Table); ok {
			p.add("checkpoint.table", "%q is an outbox table; use a table of its own, such as %s", cp.Table, DefaultCheckpointTable)
		} else if hb := c.Source.Heartbeat; hb != nil && hb.Table == cp.Table {
			p.add("checkpoint.table", "%q is the heartbeat table; use a table of its own, such as %s", cp.Table, DefaultCheckpointTable)
		}
		if cp.Name == "" {
			p.add("checkpoint.name", "is required for store: mysql; name this pipeline, such as orders-relay (one row per name)")
		} else if !checkpointNameRe.MatchString(cp.Name) {
			p.add("checkpoint.name", "%q must be 1 to 64 characters of letters, digits, _ . : - starting with a letter or digit", cp.Name)
		}
		if cp.WriterAddr == "" && len(c.Source.Addrs) > 1 {
			p.add("checkpoint.writer_addr", "is required with several source.addrs: name the writable primary by something that follows it through a failover (a DNS name, a VIP, a proxy), since the checkpoint row and the leader lock live there")
		} else if _, _, err := net.SplitHostPort(cp.WriterAddr); err != nil {
			p.add("checkpoint.writer_addr", "%q is not host:port of the writable primary (default source.addr): %v", cp.WriterAddr, err)
		}
	default:
		p.add("checkpoint.store", "%q is not allowed; use file (default) or mysql", cp.Store)
	}
}

// validateHA checks the ha section: it needs the mysql store, whose row carries the fencing
// token, and a lock name MySQL accepts.
func (c *Config) validateHA(p *problems) {
	h := c.HA
	if !h.Enabled {
		for field, set := range map[string]bool{"ha.lock_name": h.LockName != "", "ha.lease": h.Lease != 0} {
			if set {
				p.add(field, "is only for ha.enabled: true; remove it or enable ha")
			}
		}
		return
	}
	if !c.Checkpoint.MySQL() {
		p.add("ha.enabled", "needs checkpoint.store: mysql: a checkpoint file lives on one machine's disk, where a standby on another machine cannot read it, "+
			"and a file cannot make a superseded leader's writes fail; set checkpoint.store: mysql with checkpoint.name (move the file with `outboxd checkpoint migrate --from-file PATH`)")
	}
	if h.Lease < time.Second {
		p.add("ha.lease", "must be at least 1s (default %s); got %s", DefaultHALease, h.Lease)
	}
	if n := len(h.LockName); c.Checkpoint.MySQL() && (n == 0 || n > 64) {
		p.add("ha.lock_name", "%q must be 1 to 64 characters (GET_LOCK's limit; default outboxd.<checkpoint.name>.<hash of the tables>)", h.LockName)
	}
}
