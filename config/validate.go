package config

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/gtid"
)

// problems collects every FieldError of one Validate call.
type problems struct {
	c    *Config
	errs []error
}

func (p *problems) add(field, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{Field: field, Line: p.c.line(field), Problem: fmt.Sprintf(format, args...)})
}

// Validate checks the whole configuration and returns every problem joined (errors.Join), each
// a *FieldError naming the field and what is allowed; nil when the configuration is usable.
// Call ApplyDefaults first (Parse does): Validate does not treat empty optional fields as
// defaulted. It does no I/O and does not modify c; safe for concurrent use with other readers.
func (c *Config) Validate() error {
	p := &problems{c: c}
	c.validateSource(p)
	c.validateSkipChecks(p)
	c.validateTables(p)
	c.validatePatterns(p)
	c.validateSinks(p)
	c.validateRoutes(p)
	c.validateRouteNames(p)
	c.validateShape(p)
	c.validatePoison(p)
	c.validateOps(p)
	c.validateSecurity(p)

	if c.Retry.Initial <= 0 {
		p.add("retry.initial", "must be positive, such as 100ms; got %s", c.Retry.Initial)
	}
	if c.Retry.Max < c.Retry.Initial {
		p.add("retry.max", "must be at least retry.initial (%s); got %s", c.Retry.Initial, c.Retry.Max)
	}
	if c.Retry.MissingTopicTimeout <= 0 {
		p.add("retry.missing_topic_timeout", "must be positive, such as %s (how long a row waits for its topic to be created); got %s",
			DefaultMissingTopicTimeout, c.Retry.MissingTopicTimeout)
	}
	c.validateCheckpoint(p)
	c.validateDelivery(p)
	c.validateHA(p)
	c.validateReconcile(p)
	c.validateCleanup(p)
	if c.Pipeline.MaxInflightEvents < 0 {
		p.add("pipeline.max_inflight_events", "must be positive (default %d); got %d", DefaultMaxInflightEvents, c.Pipeline.MaxInflightEvents)
	}
	if c.Pipeline.MaxInflightBytes < 0 {
		p.add("pipeline.max_inflight_bytes", "must be positive (default %d); got %d", DefaultMaxInflightBytes, c.Pipeline.MaxInflightBytes)
	}
	if c.Checkpoint.Interval <= 0 {
		p.add("checkpoint.interval", "must be positive, such as 1s; got %s", c.Checkpoint.Interval)
	}
	switch c.Log.Level {
	case LogDebug, LogInfo, LogWarn, LogError:
	default:
		p.add("log.level", "%q is not allowed; use debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case LogJSON, LogConsole:
	default:
		p.add("log.format", "%q is not allowed; use json or console", c.Log.Format)
	}
	return errors.Join(p.errs...)
}

func (c *Config) validateSource(p *problems) {
	s := c.Source
	flavorOK := false
	switch s.Flavor {
	case gtid.MySQL, gtid.MariaDB:
		flavorOK = true
	case "":
		p.add("source.flavor", "is required; use mysql or mariadb")
	default:
		p.add("source.flavor", "%q is not allowed; use mysql or mariadb", s.Flavor)
	}
	switch {
	case s.Addr == "":
		p.add("source.addr", "is required; set the server's host:port, such as 127.0.0.1:3306 (or source.addrs: a list of candidates)")
	case len(s.Addrs) > 0 && s.Addrs[0] != s.Addr:
		p.add("source.addrs", "and source.addr are both set; keep one: addr for one server, addrs for candidates tried in order")
	default:
		seen := map[string]bool{}
		for i, a := range s.Addrs {
			field := "source.addr"
			if len(s.Addrs) > 1 {
				field = fmt.Sprintf("source.addrs[%d]", i)
			}
			if err := checkHostPort(a); err != nil {
				p.add(field, "%v", err)
			} else if seen[a] {
				p.add(field, "%q is listed twice", a)
			}
			seen[a] = true
		}
	}
	switch s.OnMissingGTIDs {
	case OnMissingStop, OnMissingContinue:
	default:
		p.add("source.on_missing_gtids", "%q is not allowed; use stop (default: exit naming the GTIDs no candidate has) or continue (log and count them, resume from the newest transaction both histories share)", s.OnMissingGTIDs)
	}
	if s.User == "" {
		p.add("source.user", "is required; set a user with REPLICATION SLAVE and REPLICATION CLIENT")
	}
	if s.ServerID == 0 {
		p.add("source.server_id", "is required; set an id from 1 to 4294967295 that no other replica of the server uses")
	}
	if s.ReadTimeout <= SourceHeartbeatPeriod {
		p.add("source.read_timeout", "must exceed the source heartbeat period %s (a few periods, such as the default %s; more than 30s for Dolt, which sends heartbeats every 30s); got %s",
			SourceHeartbeatPeriod, DefaultSourceReadTimeout, s.ReadTimeout)
	}
	if s.MinBinlogRetention < time.Second {
		p.add("source.min_binlog_retention", "must be at least 1s (default %s; to silence the retention warning, name binlog_retention in source.skip_checks); got %s",
			DefaultMinBinlogRetention, s.MinBinlogRetention)
	}
	switch s.Start {
	case StartLatest, StartEarliest:
	case "":
		p.add("source.start", "is required; use latest, earliest or a GTID set")
	default:
		if flavorOK {
			if _, err := gtid.Parse(s.Flavor, s.Start); err != nil {
				p.add("source.start", "%q is not latest, earliest or a %s GTID set: %v", s.Start, s.Flavor, err)
			}
			break
		}
		// Without a usable flavor a start that is no GTID set of either flavor is still
		// wrong, and is said in the same pass as the flavor: not once the flavor is fixed.
		_, errMySQL := gtid.Parse(gtid.MySQL, s.Start)
		_, errMariaDB := gtid.Parse(gtid.MariaDB, s.Start)
		if errMySQL != nil && errMariaDB != nil {
			p.add("source.start", "%q is not latest, earliest or a GTID set (MySQL: uuid:1-5, MariaDB: 0-1-100)", s.Start)
		}
	}
}

func (c *Config) validateTables(p *problems) {
	if len(c.Tables) == 0 {
		p.add("tables", "at least one outbox table is required")
	}
	seen := map[string]int{}
	for i, t := range c.Tables {
		field := fmt.Sprintf("tables[%d]", i)
		name, key := t.Table, field+".table"
		switch {
		case t.IsPattern():
			// validatePatterns checks the pattern itself.
			name, key = t.Pattern, field+".pattern"
		case !validTableName(t.Table):
			p.add(field+".table", "%q is not \"schema.table\" (one dot, no spaces, quotes or glob characters; for many tables use pattern: such as \"shop_*.outbox_event\")", t.Table)
			continue
		}
		if first, dup := seen[name]; dup {
			p.add(key, "%q is already listed as tables[%d]", name, first)
			continue
		}
		seen[name] = i
		cols := []struct{ name, val string }{
			{"event_id", t.Columns.EventID}, {"key", t.Columns.Key}, {"topic", t.Columns.Topic},
			{"payload", t.Columns.Payload}, {"event_type", t.Columns.EventType}, {"headers", t.Columns.Headers},
		}
		for _, col := range cols {
			if col.val == "" {
				p.add(field+".columns."+col.name, "is empty; name the column, or omit it for the default %q", col.name)
			} else if strings.ContainsAny(col.val, "`\x00") {
				p.add(field+".columns."+col.name, "%q is not a column name", col.val)
			}
		}
		if strings.ContainsAny(t.Columns.CreatedAt, "`\x00") {
			p.add(field+".columns.created_at", "%q is not a column name", t.Columns.CreatedAt)
		}
	}
}

func validTableName(s string) bool {
	schema, name, ok := strings.Cut(s, ".")
	if !ok || schema == "" || name == "" || strings.Contains(name, ".") {
		return false
	}
	return !strings.ContainsAny(s, " \t\r\n`'\"*?[]\\/\x00")
}

func (c *Config) validateSinks(p *problems) {
	if len(c.Sinks) == 0 {
		p.add("sinks", "at least one sink is required, such as main: {type: kafka, brokers: [\"127.0.0.1:9092\"]}")
	}
	for _, name := range sortedKeys(c.Sinks) {
		s := c.Sinks[name]
		field := "sinks." + name
		if name == "" {
			p.add("sinks", "a sink has an empty name")
		}
		// wrong lists the fields of the other sink type that are set: a setting that would be
		// silently ignored is a mistake worth stopping for.
		var wrong []string
		switch s.Type {
		case SinkKafka:
			checkAddrs(p, field+".brokers", s.Brokers, "broker", "127.0.0.1:9092")
			if s.ClientID == "" {
				p.add(field+".client_id", "is required")
			}
			if s.Timeout <= 0 {
				p.add(field+".timeout", "must be positive, such as 10s; got %s", s.Timeout)
			}
			if s.MaxMessageBytes <= 0 {
				p.add(field+".max_message_bytes", "must be positive, such as 1048576; got %d", s.MaxMessageBytes)
			}
			switch s.Compression {
			case CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd:
			default:
				p.add(field+".compression", "%q is not allowed; use none, gzip, snappy, lz4 or zstd", s.Compression)
			}
			wrong = setFields(map[string]bool{
				"nameservers": len(s.Nameservers) > 0, "group": s.Group != "", "namespace": s.Namespace != "",
				"access_key": s.AccessKey != "", "secret_key": s.SecretKey != "", "send_timeout": s.SendTimeout != 0,
				"access_key_file": s.AccessKeyFile != "", "secret_key_file": s.SecretKeyFile != "",
			})
		case SinkRocketMQ:
			checkAddrs(p, field+".nameservers", s.Nameservers, "NameServer", "127.0.0.1:9876")
			if s.Group == "" {
				p.add(field+".group", "is required")
			}
			if s.SendTimeout <= 0 {
				p.add(field+".send_timeout", "must be positive, such as 3s; got %s", s.SendTimeout)
			}
			if (s.AccessKey == "") != (s.SecretKey == "") {
				p.add(field+".secret_key", "access_key and secret_key must be set together or not at all")
			}
			wrong = setFields(map[string]bool{
				"brokers": len(s.Brokers) > 0, "client_id": s.ClientID != "", "timeout": s.Timeout != 0,
				"max_message_bytes": s.MaxMessageBytes != 0, "tls": s.TLS != nil, "sasl": s.SASL != nil,
				"compression": s.Compression != "",
				"idempotent":  s.Idempotent != nil,
			})
		case "":
			p.add(field+".type", "is required; use kafka or rocketmq")
		default:
			p.add(field+".type", "%q is not allowed; use kafka or rocketmq", s.Type)
		}
		for _, f := range wrong {
			p.add(field+"."+f, "is not a %s setting; remove it or change type", s.Type)
		}
	}
}

func setFields(m map[string]bool) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		if m[k] {
			out = append(out, k)
		}
	}
	return out
}

func checkAddrs(p *problems, field string, addrs []string, what, example string) {
	if len(addrs) == 0 {
		p.add(field, "at least one %s host:port is required, such as %s", what, example)
	}
	for i, a := range addrs {
		if err := checkHostPort(a); err != nil {
			p.add(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
	}
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q has port %q; want 1 to 65535", addr, port)
	}
	return nil
}

func (c *Config) validateRoutes(p *problems) {
	if len(c.Routes) == 0 {
		p.add("routes", "at least one route is required, such as {sink: main}")
	}
	sinkNames := strings.Join(sortedKeys(c.Sinks), ", ")
	for i, r := range c.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		tableGlobOK := checkGlob(p, field+".match.table", r.Match.Table)
		checkGlob(p, field+".match.topic", r.Match.Topic)
		if tableGlobOK && r.Match.Table != "" && len(c.Tables) > 0 {
			matched := false
			for _, t := range c.Tables {
				// Which tables a pattern entry will match is known only on the server.
				if ok, _ := path.Match(r.Match.Table, t.Table); ok || t.IsPattern() {
					matched = true
					break
				}
			}
			if !matched {
				p.add(field+".match.table", "%q matches none of the configured tables, so the route can never be used", r.Match.Table)
			}
		}
		sink, sinkOK := c.Sinks[r.Sink]
		switch {
		case r.Sink == "":
			p.add(field+".sink", "is required; name one of the sinks: %s", sinkNames)
		case !sinkOK:
			p.add(field+".sink", "%q is not a configured sink; defined: %s", r.Sink, sinkNames)
		}
		if _, err := ParseTemplate(r.Topic); err != nil {
			p.add(field+".topic", "%v", err)
		}
		if r.Tag != "" {
			if _, err := ParseTemplate(r.Tag); err != nil {
				p.add(field+".tag", "%v", err)
			}
			if sinkOK && sink.Type != SinkRocketMQ {
				p.add(field+".tag", "is only used by rocketmq sinks; sink %q is %s", r.Sink, sink.Type)
			}
		}
	}
}

func checkGlob(p *problems, field, glob string) bool {
	if glob == "" {
		return true
	}
	if _, err := path.Match(glob, ""); err != nil {
		p.add(field, "%q is not a valid glob (path.Match syntax: * ? [a-z] and \\ to escape): %v", glob, err)
		return false
	}
	return true
}

func (c *Config) validatePoison(p *problems) {
	switch c.OnPoison {
	case OnPoisonStop, OnPoisonDeadLetter:
	default:
		p.add("on_poison", "%q is not allowed; use stop or dead_letter", c.OnPoison)
	}
	dl := c.DeadLetter
	if dl == nil {
		if c.OnPoison == OnPoisonDeadLetter {
			p.add("dead_letter", "is required with on_poison: dead_letter; set {sink: <name>, topic: <topic>}")
		}
		return
	}
	if dl.Sink == "" {
		p.add("dead_letter.sink", "is required; name one of the sinks: %s", strings.Join(sortedKeys(c.Sinks), ", "))
	} else if _, ok := c.Sinks[dl.Sink]; !ok {
		p.add("dead_letter.sink", "%q is not a configured sink; defined: %s", dl.Sink, strings.Join(sortedKeys(c.Sinks), ", "))
	}
	if dl.Topic == "" {
		p.add("dead_letter.topic", "is required, such as outbox.dead_letter")
	} else if strings.ContainsAny(dl.Topic, "{}") {
		p.add("dead_letter.topic", "%q: the dead-letter topic is literal; placeholders are not supported", dl.Topic)
	}
}

// validateOps checks the admin server and the heartbeat row.
func (c *Config) validateOps(p *problems) {
	// An empty host (":9120") binds every interface: allowed, since the operator asked for it
	// and nothing served holds a secret.
	if addr := c.Admin.Addr(); addr != "" {
		if _, port, err := net.SplitHostPort(addr); err != nil {
			p.add("admin.listen", "%q is not host:port (such as %s), \"\" or off: %v", addr, DefaultAdminListen, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			p.add("admin.listen", "%q has port %q; want 0 to 65535", addr, port)
		}
	}
	hb := c.Source.Heartbeat
	if hb == nil {
		return
	}
	if !validTableName(hb.Table) {
		p.add("source.heartbeat.table", "%q is not \"schema.table\", such as outboxd.heartbeat", hb.Table)
	} else if _, ok := c.TableByName(hb.Table); ok {
		p.add("source.heartbeat.table", "%q is an outbox table; use a table of its own, such as outboxd.heartbeat", hb.Table)
	}
	if hb.Interval <= 0 {
		p.add("source.heartbeat.interval", "must be positive, such as 5s; got %s", hb.Interval)
	}
}
