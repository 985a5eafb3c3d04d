package config

import (
	"net"
	"regexp"
	"strings"
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
		onlyFor(p, "mysql or kafka", map[string]bool{"checkpoint.name": cp.Name != "", "checkpoint.writer_addr": cp.WriterAddr != ""})
		onlyFor(p, "mysql", map[string]bool{"checkpoint.table": cp.Table != ""})
		onlyFor(p, "kafka", map[string]bool{"checkpoint.sink": cp.Sink != "", "checkpoint.topic": cp.Topic != ""})
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
		checkName(p, cp.Name, "mysql", "one row per name")
		if cp.WriterAddr == "" && len(c.Source.Addrs) > 1 {
			p.add("checkpoint.writer_addr", "is required with several source.addrs: name the writable primary by something that follows it through a failover (a DNS name, a VIP, a proxy), since the checkpoint row and the leader lock live there")
		} else {
			checkWriterAddr(p, cp.WriterAddr)
		}
		onlyFor(p, "kafka", map[string]bool{"checkpoint.sink": cp.Sink != "", "checkpoint.topic": cp.Topic != ""})
	case CheckpointStoreKafka:
		c.validateKafkaCheckpoint(p)
	default:
		p.add("checkpoint.store", "%q is not allowed; use file (default), mysql or kafka (with delivery: exactly_once)", cp.Store)
	}
}

// validateKafkaCheckpoint checks the kafka store: the checkpoint records go to checkpoint.topic
// on checkpoint.sink's cluster, in the transactions of delivery: exactly_once.
func (c *Config) validateKafkaCheckpoint(p *problems) {
	cp := c.Checkpoint
	if !c.ExactlyOnce() && c.deliveryKnown() { // a misspelt delivery is that one problem
		p.add("checkpoint.store", "kafka needs delivery: exactly_once: a Kafka checkpoint is written only inside the transaction that carries the events it covers; "+
			"set delivery: exactly_once, or use store: file or mysql")
	}
	onlyFor(p, "file", map[string]bool{"checkpoint.path": cp.Path != ""})
	onlyFor(p, "mysql", map[string]bool{"checkpoint.table": cp.Table != ""})
	checkName(p, cp.Name, "kafka", `the transactional.id is "outboxd-" + name`)
	kafkaSinks := []string{}
	for _, name := range sortedKeys(c.Sinks) {
		if c.Sinks[name].Type == SinkKafka {
			kafkaSinks = append(kafkaSinks, name)
		}
	}
	switch s, ok := c.Sinks[cp.Sink]; {
	case cp.Sink == "":
		p.add("checkpoint.sink", "is required for store: kafka; name the Kafka sink whose cluster holds the checkpoint topic (Kafka sinks: %s)", orNone(kafkaSinks))
	case !ok:
		p.add("checkpoint.sink", "%q is not a configured sink; Kafka sinks: %s", cp.Sink, orNone(kafkaSinks))
	case s.Type != SinkKafka:
		p.add("checkpoint.sink", "%q is a %s sink; name a Kafka sink (Kafka sinks: %s)", cp.Sink, s.Type, orNone(kafkaSinks))
	}
	switch {
	case cp.Topic == "":
		p.add("checkpoint.topic", "is required for store: kafka; name a topic of its own, such as outboxd_checkpoints (outboxd check creates it compacted with one partition)")
	case len(cp.Topic) > 249 || cp.Topic == "." || cp.Topic == ".." || !kafkaTopicRe.MatchString(cp.Topic):
		p.add("checkpoint.topic", "%q is not a Kafka topic name: 1 to 249 characters of letters, digits, . _ -", cp.Topic)
	case c.DeadLetter != nil && c.DeadLetter.Topic == cp.Topic:
		p.add("checkpoint.topic", "%q is also dead_letter.topic; use a topic of its own, such as outboxd_checkpoints", cp.Topic)
	default:
		for i, r := range c.Routes {
			if r.Topic == cp.Topic {
				p.add("checkpoint.topic", "%q is also routes[%d].topic; use a topic of its own, such as outboxd_checkpoints", cp.Topic, i)
				break
			}
		}
	}
	if cp.WriterAddr == "" && len(c.Source.Addrs) > 1 {
		anyCleanup, _ := c.CleanupAny()
		if c.HA.Enabled || anyCleanup {
			p.add("checkpoint.writer_addr", "is required with several source.addrs and ha or cleanup: name the writable primary by something that follows it through a failover "+
				"(a DNS name, a VIP, a proxy), since the leader lock lives and cleanup deletes there")
		}
	} else if cp.WriterAddr != "" {
		checkWriterAddr(p, cp.WriterAddr)
	}
}

// checkName checks checkpoint.name for a store that needs it; why says what the name keys.
func checkName(p *problems, name, store, why string) {
	if name == "" {
		p.add("checkpoint.name", "is required for store: %s; name this pipeline, such as orders-relay (%s)", store, why)
	} else if !checkpointNameRe.MatchString(name) {
		p.add("checkpoint.name", "%q must be 1 to 64 characters of letters, digits, _ . : - starting with a letter or digit", name)
	}
}

func checkWriterAddr(p *problems, addr string) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		p.add("checkpoint.writer_addr", "%q is not host:port of the writable primary (default source.addr): %v", addr, err)
	}
}

// onlyFor reports each set field as belonging to another checkpoint store.
func onlyFor(p *problems, stores string, set map[string]bool) {
	for _, field := range sortedKeys(set) {
		if set[field] {
			p.add(field, "is only for store: %s; remove it or set checkpoint.store: %s", stores, stores)
		}
	}
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// validateHA checks the ha section: it needs a store every instance reaches and that refuses a
// superseded leader (mysql: its row carries the fencing token; kafka: the broker fences the
// transactional.id), and a lock name MySQL accepts. The file store keeps its refusal.
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
	shared := c.Checkpoint.MySQL() || c.Checkpoint.Kafka()
	if !shared {
		p.add("ha.enabled", "needs checkpoint.store: mysql: a checkpoint file lives on one machine's disk, where a standby on another machine cannot read it, "+
			"and a file cannot make a superseded leader's writes fail; set checkpoint.store: mysql with checkpoint.name (move the file with `outboxd checkpoint migrate --from-file PATH`), or kafka with delivery: exactly_once")
	}
	if h.Lease < time.Second {
		p.add("ha.lease", "must be at least 1s (default %s); got %s", DefaultHALease, h.Lease)
	}
	if n := len(h.LockName); shared && (n == 0 || n > 64) {
		p.add("ha.lock_name", "%q must be 1 to 64 characters (GET_LOCK's limit; default outboxd.<checkpoint.name>.<hash of the tables>)", h.LockName)
	}
}
