package config

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// redactedValue replaces a secret in Redacted and String.
const redactedValue = "***"

// Redacted returns a deep copy of c with source.password, source.tls.key, every sink's
// access_key, secret_key, sasl.password and tls.key replaced by "***" (empty ones stay empty, which shows they are unset). Safe for
// concurrent use with other readers of c.
func (c *Config) Redacted() *Config {
	r := *c
	r.Source = c.Source.redacted()
	r.Tables = slices.Clone(c.Tables)
	r.Routes = slices.Clone(c.Routes)
	if c.Sinks != nil {
		r.Sinks = make(map[string]Sink, len(c.Sinks))
		for name, s := range c.Sinks {
			r.Sinks[name] = s.redacted()
		}
	}
	if c.DeadLetter != nil {
		dl := *c.DeadLetter
		r.DeadLetter = &dl
	}
	if c.Admin.Listen != nil {
		l := *c.Admin.Listen
		r.Admin.Listen = &l
	}
	r.lines = maps.Clone(c.lines)
	return &r
}

func (s Source) redacted() Source {
	s.Password = redact(s.Password)
	s.SkipChecks = slices.Clone(s.SkipChecks)
	s.Addrs = slices.Clone(s.Addrs)
	if s.TLS != nil {
		t := *s.TLS
		t.Key = redact(t.Key)
		s.TLS = &t
	}
	if s.Heartbeat != nil {
		hb := *s.Heartbeat
		s.Heartbeat = &hb
	}
	return s
}

func (s Sink) redacted() Sink {
	s.Brokers = slices.Clone(s.Brokers)
	s.Nameservers = slices.Clone(s.Nameservers)
	s.AccessKey = redact(s.AccessKey)
	s.SecretKey = redact(s.SecretKey)
	if s.TLS != nil {
		t := *s.TLS
		t.Key = redact(t.Key)
		s.TLS = &t
	}
	if s.SASL != nil {
		a := *s.SASL
		a.Password = redact(a.Password)
		s.SASL = &a
	}
	return s
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return redactedValue
}

// String renders the configuration as YAML with secrets redacted, for logs and `outboxd check`.
// It has a value receiver so that fmt's %v and %+v on a Config, not only on a *Config, can never
// print a password.
func (c Config) String() string { return renderYAML(c.Redacted()) }

// String renders the source with the password redacted.
func (s Source) String() string { return renderYAML(s.redacted()) }

// String renders the sink with its keys redacted.
func (s Sink) String() string { return renderYAML(s.redacted()) }

func renderYAML(v any) string {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(toNode(reflect.ValueOf(v))); err != nil {
		return "<unprintable config: " + err.Error() + ">"
	}
	_ = enc.Close()
	return b.String()
}

// toNode converts a config value to a YAML node by hand because yaml.v3 encodes time.Duration as
// integer nanoseconds, which the decoder then refuses; here durations print as "100ms".
func toNode(v reflect.Value) *yaml.Node {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
		v = v.Elem()
	}
	if v.Type() == durationType {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: time.Duration(v.Int()).String()}
	}
	switch v.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := range t.NumField() {
			name, ok := FieldKey(t.Field(i))
			if !ok {
				continue
			}
			fv := v.Field(i)
			if fv.IsZero() {
				continue
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, toNode(fv))
		}
		if len(n.Content) <= 12 && allScalar(n.Content) {
			n.Style = yaml.FlowStyle
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.String()}, toNode(v.MapIndex(k)))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			n.Content = append(n.Content, toNode(v.Index(i)))
		}
		if allScalar(n.Content) {
			n.Style = yaml.FlowStyle
		}
		return n
	case reflect.String:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v.String()}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(v.Uint(), 10)}
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v.String()}
}

func allScalar(ns []*yaml.Node) bool {
	for _, n := range ns {
		if n.Kind != yaml.ScalarNode {
			return false
		}
	}
	return true
}
