package config

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem with one configuration field.
type FieldError struct {
	// Field is the path of the field: "source.server_id", "routes[1].sink", "sinks.main.brokers".
	// Empty for the document as a whole.
	Field string
	// Line is the line in the file, or 0 when unknown (a Config built in code, a missing field).
	Line int
	// Problem says what is wrong and what is allowed.
	Problem string
}

func (e *FieldError) Error() string {
	field := e.Field
	if field == "" {
		field = "config"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", field, e.Line, e.Problem)
	}
	return field + ": " + e.Problem
}

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[time.Duration]()
)

// maxWalkSteps bounds the work on one document: YAML aliases can make a small file describe a
// huge tree, and the configuration never legitimately needs more than a few thousand nodes.
const maxWalkSteps = 100_000

// walker checks a parsed YAML tree against the Config type before it is decoded: it rejects
// unknown keys and values of the wrong type with the field's path (yaml's own KnownFields error
// names only a line), expands environment variables in scalar values, and records each path's
// line for Validate.
type walker struct {
	lookup func(string) (string, bool)
	lines  map[string]int
	errs   []error
	steps  int
	// expanded holds the scalar nodes whose value was already expanded.
	expanded map[*yaml.Node]bool
	// noSecrets replaces secret values by a placeholder without expanding them.
	noSecrets bool
}

func (w *walker) fail(path string, line int, format string, args ...any) {
	w.errs = append(w.errs, &FieldError{Field: path, Line: line, Problem: fmt.Sprintf(format, args...)})
}

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	w.steps++
	if w.steps > maxWalkSteps {
		if w.steps == maxWalkSteps+1 {
			w.fail(path, n.Line, "the document has more than %d nodes (counting aliases); it cannot be a valid configuration", maxWalkSteps)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) > 0 {
			w.walk(n.Content[0], t, path)
		}
		return
	}
	if n.Kind == 0 {
		return
	}
	if path != "" {
		w.lines[path] = n.Line
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		// An empty value leaves the field at its zero value; defaults and Validate handle it.
		return
	}
	switch {
	case t.Kind() == reflect.Struct:
		w.walkStruct(n, t, path)
	case t.Kind() == reflect.Map:
		for _, kv := range w.pairs(n, t, path) {
			w.walkValue(kv, t.Elem(), join(path, kv[0].Value))
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.fail(path, n.Line, "want %s, got %s", describeType(t), describeNode(n))
			return
		}
		for i, item := range n.Content {
			w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		w.walkScalar(n, t, path)
	}
}

func (w *walker) walkStruct(n *yaml.Node, t reflect.Type, path string) {
	pairs := w.pairs(n, t, path)
	if len(pairs) == 0 {
		return
	}
	fields := map[string]reflect.Type{}
	var names []string
	variant := variantOf(pairs)
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := FieldKey(f)
		if !ok {
			continue
		}
		fields[name] = f.Type
		// The keys allowed here are those of the mapping's own type (a Sink's type: kafka
		// lists no RocketMQ key); a wrong type's key is Validate's "not a kafka setting".
		if only := f.Tag.Get("only"); only == "" || variant == "" || only == variant {
			names = append(names, name)
		}
	}
	for _, kv := range pairs {
		ft, ok := fields[kv[0].Value]
		if !ok {
			w.fail(join(path, kv[0].Value), kv[0].Line, "unknown field %q; allowed here: %s", kv[0].Value, strings.Join(names, ", "))
			continue
		}
		w.walkValue(kv, ft, join(path, kv[0].Value))
	}
}

// variantOf returns the value of a mapping's type key when it names a variant some fields are
// tagged only for (Sink: kafka, rocketmq), else "": then every key is listed as allowed.
func variantOf(pairs [][2]*yaml.Node) string {
	for _, kv := range pairs {
		if kv[0].Value == "type" && kv[1].Kind == yaml.ScalarNode {
			switch v := kv[1].Value; v {
			case SinkKafka, SinkRocketMQ:
				return v
			}
		}
	}
	return ""
}

// walkValue walks a mapping value and records the key's line for its path: with block style
// the value starts on the next line, but an operator looks for the key.
func (w *walker) walkValue(kv [2]*yaml.Node, t reflect.Type, path string) {
	w.walk(kv[1], t, path)
	w.lines[path] = kv[0].Line
}

// pairs returns a mapping's key/value pairs after checking that n is a mapping whose keys are
// plain, unique scalars.
func (w *walker) pairs(n *yaml.Node, t reflect.Type, path string) [][2]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		w.fail(path, n.Line, "want %s, got %s", describeType(t), describeNode(n))
		return nil
	}
	var out [][2]*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			w.fail(path, k.Line, "a key must be a plain name, got %s", describeNode(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			// Merge keys would let one value come from two places; the config stays explicit.
			w.fail(path, k.Line, "YAML merge keys (<<) are not supported; write the fields out")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			w.fail(join(path, k.Value), k.Line, "is already set at line %d; keep one", first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out
}

func (w *walker) walkScalar(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		w.fail(path, n.Line, "want %s, got %s", describeType(t), describeNode(n))
		return
	}
	if w.noSecrets && isSecretField(path) && n.Value != "" {
		n.Value, n.Tag, n.Style = secretPlaceholder, "!!str", yaml.DoubleQuotedStyle
		return
	}
	// An aliased node is visited once per alias; its value must be expanded only once, or a
	// "$$" coming from the environment would be expanded a second time.
	if strings.Contains(n.Value, "$") && !w.expanded[n] {
		if w.expanded == nil {
			w.expanded = map[*yaml.Node]bool{}
		}
		w.expanded[n] = true
		v, err := expand(n.Value, w.lookup)
		if err != nil {
			w.fail(path, n.Line, "%v", err)
			return
		}
		if v != n.Value {
			n.Value = v
			if t.Kind() == reflect.String {
				// Quoted style keeps a value such as "null", "123" or "true" a string.
				n.Tag, n.Style = "!!str", yaml.DoubleQuotedStyle
			} else {
				// Let the expanded text resolve as if written plainly: server_id: ${ID} is an int.
				n.Tag, n.Style = "", 0
			}
		}
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		w.fail(path, n.Line, "want %s, got %q", describeType(t), n.Value)
	}
}

// FieldKey returns the key of the struct field f in the configuration file, from its yaml tag,
// and false for a field the file cannot set (unexported, untagged or "-"). Pure.
func FieldKey(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name, f.IsExported() && name != "" && name != "-"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describeType(t reflect.Type) string {
	if t == durationType {
		return `a duration such as "100ms", "10s" or "1m"`
	}
	switch t.Kind() {
	case reflect.Struct:
		return "a mapping"
	case reflect.Map:
		return "a mapping of names to settings"
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return "an integer from 0 to " + strconv.FormatUint(uint64(1)<<(t.Bits())-1, 10)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}

// expand replaces ${NAME} with the variable's value, ${NAME:-default} with the value or, when
// the variable is unset or empty, the default, and $$ with $. Other '$' are kept, so "pa$word"
// needs no escaping; "$${" is how to write a literal "${".
func expand(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ (write $${ for a literal ${)")
			}
			body := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(body, ":-")
			if !validVarName(name) {
				return "", fmt.Errorf("invalid variable reference ${%s}: use ${NAME} or ${NAME:-default} where NAME is letters, digits and _", body)
			}
			v, ok := lookup(name)
			switch {
			case hasDef && v == "":
				v = def
			case !ok:
				return "", fmt.Errorf("environment variable %s is not set; set it, or write ${%s:-default}", name, name)
			}
			b.WriteString(v)
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String(), nil
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// line returns the line of field or of its nearest ancestor present in the file, 0 if unknown.
func (c *Config) line(field string) int {
	for field != "" {
		if l, ok := c.lines[field]; ok {
			return l
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
