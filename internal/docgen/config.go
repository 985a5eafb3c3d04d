package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
)

// configKey is one YAML key of the configuration file as the reference lists it.
type configKey struct {
	// Path is the full dotted path: "sinks.<name>.tls.ca_file", "tables[].columns.key".
	Path string
	// Type says what the value is, in the file's terms.
	Type string
	// Section is true for a key whose value is a mapping or list of further keys.
	Section bool
	// Default is the value outboxd uses when the key is left out, "" when it has none or when
	// it follows another key (Derived).
	Default string
	// Derived is true when the default is computed from other keys; Doc says from which.
	Derived bool
	// Allowed are the values the code accepts, when it knows them as constants; AllowedNote is
	// what the constant group's comment adds in parentheses ("besides a GTID set").
	Allowed     []string
	AllowedNote string
	// Doc is the field's doc comment (or its type's, for a section), identifiers of config's
	// constants replaced by their values.
	Doc string
}

var durationType = reflect.TypeFor[time.Duration]()

// configKeys walks config.Config by reflection and returns every YAML key in file order, each
// with the doc comment read from config's source in dir, its default (found by running
// ApplyDefaults, see configDefaults) and its allowed values (config's constant groups whose doc
// comment starts with "<path> values").
func configKeys(dir string) ([]configKey, error) {
	src, err := readConfigSource(dir)
	if err != nil {
		return nil, err
	}
	defaults, derived, err := configDefaults()
	if err != nil {
		return nil, err
	}
	var keys []configKey
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, ok := config.FieldKey(f)
			if !ok {
				continue
			}
			p := joinPath(path, name)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			k := configKey{Path: p, Default: defaults[p], Derived: derived[p], Allowed: src.allowed[p], AllowedNote: src.allowedNote[p]}
			k.Doc = userDoc(src.fieldDoc(t.Name(), f.Name), f.Name, yamlNames(t))
			// A section without a doc of its own takes its type's.
			sectionDoc := func(elem reflect.Type) string {
				return firstNonEmpty(k.Doc, userDoc(src.typeDoc(elem.Name()), elem.Name(), yamlNames(elem)))
			}
			switch {
			case ft.Kind() == reflect.Struct && ft != durationType:
				k.Type, k.Section, k.Doc = "mapping", true, sectionDoc(ft)
				keys = append(keys, k)
				walk(ft, p)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				k.Type, k.Section, k.Doc = "list of mappings", true, sectionDoc(ft.Elem())
				keys = append(keys, k)
				walk(ft.Elem(), p+"[]")
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				k.Type, k.Section, k.Doc = "mapping of names to mappings", true, sectionDoc(ft.Elem())
				keys = append(keys, k)
				walk(ft.Elem(), p+".<name>")
			default:
				k.Type = typeName(ft)
				keys = append(keys, k)
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	// A "<path> values" constant group naming no key is a typo the reference would hide.
	for p := range src.allowed {
		if !slices.ContainsFunc(keys, func(k configKey) bool { return k.Path == p }) {
			return nil, fmt.Errorf("config's constant group %q values names no configuration key", p)
		}
	}
	for i := range keys {
		keys[i].Doc = src.substitute(keys[i].Doc)
	}
	return keys, nil
}

// yamlNames maps the Go names of t's fields to their keys.
func yamlNames(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		if name, ok := config.FieldKey(t.Field(i)); ok {
			out[t.Field(i).Name] = name
		}
	}
	return out
}

// plainWord is an English word, which may start a sentence capitalised (not ce_source).
var plainWord = regexp.MustCompile(`^[a-z]+[,:;]?$`)

// goName is a Go identifier that starts with a capital letter.
var goName = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// userDoc turns a Go doc comment on name into the reference's words: "Addr is the server's
// host:port" becomes "The server's host:port", and the Go names of the struct's fields become
// their keys.
func userDoc(doc, name string, fields map[string]string) string {
	for _, verb := range []string{" is ", " are "} {
		if rest, ok := strings.CutPrefix(doc, name+verb); ok && rest != "" {
			doc = rest
			if first, _, _ := strings.Cut(rest, " "); plainWord.MatchString(first) {
				doc = strings.ToUpper(rest[:1]) + rest[1:]
			}
			break
		}
	}
	if rest, ok := strings.CutPrefix(doc, name+" "); ok && fields[name] != "" {
		doc = "`" + fields[name] + "` " + rest
	}
	return goName.ReplaceAllStringFunc(doc, func(w string) string {
		// TLS, SASL, HA: in a sentence these are the acronyms, not the fields.
		if key, ok := fields[w]; ok && strings.ToUpper(w) != w {
			return "`" + key + "`"
		}
		return w
	})
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func typeName(t reflect.Type) string {
	if t == durationType {
		return `duration ("100ms", "10s", "1m", "24h")`
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Uint32:
		return "integer (0 to 4294967295)"
	case reflect.Uint, reflect.Uint64:
		return "integer (0 or more)"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "mapping of " + typeName(t.Key()) + " to " + typeName(t.Elem())
	}
	return t.String()
}

// configSource is what the reference takes from config's source: doc comments, allowed values
// and the values of exported constants.
type configSource struct {
	fields  map[string]map[string]string // type → field → doc
	types   map[string]string            // type → doc
	allowed map[string][]string          // key path → values
	// allowedNote is the parenthesis after "<path> values" in the group's comment.
	allowedNote map[string]string
	consts      map[string]string // exported constant → its value as a user writes it
	idents      *regexp.Regexp    // matches the names of consts
}

// allowedGroup is the doc comment of a constant group listing a key's values.
var allowedGroup = regexp.MustCompile(`^([a-z_]+(?:\[\]|\.<name>)?(?:\.[a-z_]+(?:\[\]|\.<name>)?)*) values\b(?: \(([^)]*)\))?`)

func readConfigSource(dir string) (*configSource, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse config: %w", err)
		}
		files = append(files, f)
	}
	// Type-checking from source gives the constants' values, typed (a time.Duration prints as
	// one), without listing any of them here.
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	tpkg, err := conf.Check("github.com/outboxd/outboxd/config", fset, files, nil)
	if err != nil {
		return nil, fmt.Errorf("type-check config: %w", err)
	}
	s := &configSource{fields: map[string]map[string]string{}, types: map[string]string{}, allowed: map[string][]string{}, allowedNote: map[string]string{}, consts: map[string]string{}}
	for _, name := range tpkg.Scope().Names() {
		c, ok := tpkg.Scope().Lookup(name).(*types.Const)
		if !ok || !c.Exported() {
			continue
		}
		s.consts[name] = constText(c)
	}
	consts := slices.Sorted(maps.Keys(s.consts))
	slices.SortFunc(consts, func(a, b string) int { return len(b) - len(a) }) // longest first
	s.idents = regexp.MustCompile(`\b(` + strings.Join(consts, "|") + `)\b`)
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			switch g.Tok {
			case token.TYPE:
				for _, spec := range g.Specs {
					ts := spec.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil && len(g.Specs) == 1 {
						doc = g.Doc
					}
					s.types[ts.Name.Name] = text(doc)
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					m := map[string]string{}
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							m[n.Name] = firstNonEmpty(text(fl.Doc), text(fl.Comment))
						}
					}
					s.fields[ts.Name.Name] = m
				}
			case token.CONST:
				mm := allowedGroup.FindStringSubmatch(text(g.Doc))
				if mm == nil {
					continue
				}
				if mm[2] != "" {
					s.allowedNote[mm[1]] = mm[2]
				}
				for _, spec := range g.Specs {
					for _, n := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Default") {
							continue
						}
						s.allowed[mm[1]] = append(s.allowed[mm[1]], s.consts[n.Name])
					}
				}
			}
		}
	}
	return s, nil
}

// text is a comment group as one line per paragraph, without the paragraphs for developers
// (those that start with "In code").
func text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(g.Text()), "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); !strings.HasPrefix(p, "In code") {
			paras = append(paras, p)
		}
	}
	return strings.Join(paras, "\n\n")
}

func (s *configSource) fieldDoc(typ, field string) string { return s.fields[typ][field] }
func (s *configSource) typeDoc(typ string) string         { return s.types[typ] }

// substitute replaces the names of config's constants in doc with their values, so the
// reference says "default 10s", not "default DefaultKafkaTimeout".
func (s *configSource) substitute(doc string) string {
	return s.idents.ReplaceAllStringFunc(doc, func(name string) string { return s.consts[name] })
}

func constText(c *types.Const) string {
	v := c.Val()
	if isDuration(c.Type()) {
		if n, ok := constant.Int64Val(v); ok {
			return formatDuration(time.Duration(n))
		}
	}
	switch v.Kind() {
	case constant.String:
		return constant.StringVal(v)
	case constant.Int:
		if n, ok := constant.Int64Val(v); ok {
			return strconv.FormatInt(n, 10)
		}
	}
	return v.ExactString()
}

func isDuration(t types.Type) bool {
	named, ok := t.(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "time" && named.Obj().Name() == "Duration"
}

// formatDuration writes d as a user would in the file: "168h", "5m", "1m30s", "100ms".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// renderConfig writes the configuration reference.
func renderConfig(keys []configKey) []byte {
	var b bytes.Buffer
	b.WriteString(generatedHeader)
	b.WriteString(`# Configuration reference

Every key of outboxd's YAML configuration file, generated from the configuration's code and its
documentation. The file is decoded strictly: an unknown key anywhere is an error that names the
keys allowed there. In a value (never in a key), ` + "`${VAR}`" + ` is replaced by the environment variable
VAR (an unset one is an error) and ` + "`${VAR:-default}`" + ` by VAR or, when it is unset or empty, by the
default; write ` + "`$$`" + ` for a literal ` + "`$`" + `. ` + "`outboxd check`" + ` and ` + "`outboxd run`" + ` report every problem of
the file at once, each naming the key and its line.

A path such as ` + "`tables[].columns.key`" + ` is a key of each item of the list ` + "`tables`" + `;
` + "`sinks.<name>.brokers`" + ` is a key of each named sink. A default marked "derived" follows another key, as
its description says. Keys without a default are empty or off when left out.

`)
	var top []string
	for _, k := range keys {
		if !strings.ContainsAny(k.Path, ".[") {
			top = append(top, k.Path)
		}
	}
	b.WriteString("Top-level keys: ")
	for i, t := range top {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[`%s`](#%s)", t, anchor(t))
	}
	b.WriteString(".\n")
	for _, k := range keys {
		if !strings.ContainsAny(k.Path, ".[") {
			fmt.Fprintf(&b, "\n## %s\n", k.Path)
		}
		fmt.Fprintf(&b, "\n### `%s`\n\n", k.Path)
		facts := []string{"Type: " + k.Type}
		switch {
		case k.Derived:
			facts = append(facts, "Default: derived")
		case k.Default != "":
			facts = append(facts, "Default: `"+k.Default+"`")
		}
		if len(k.Allowed) > 0 {
			allowed := "Allowed: `" + strings.Join(k.Allowed, "`, `") + "`"
			if k.AllowedNote != "" {
				allowed += " (" + k.AllowedNote + ")"
			}
			facts = append(facts, allowed)
		}
		b.WriteString(strings.Join(facts, ". ") + ".\n")
		if k.Doc != "" {
			// "<schema>" would be read as an HTML tag.
			b.WriteString("\n" + strings.ReplaceAll(k.Doc, "<", "&lt;") + "\n")
		}
	}
	return b.Bytes()
}

// anchor is the GitHub anchor of a heading of plain text.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
