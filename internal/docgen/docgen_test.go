package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/preflight"
)

const root = "../.."

// testKeys type-checks config's source once for the tests that read the keys (it takes seconds).
var testKeys = sync.OnceValues(func() ([]configKey, error) { return configKeys(filepath.Join(root, "config")) })

// Each generated page is what the code generates now.
func TestReferencesUpToDate(t *testing.T) {
	pages, err := references(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		got, err := os.ReadFile(filepath.Join(root, p.path))
		if err != nil {
			t.Errorf("%s: %v: run make docs", p.path, err)
			continue
		}
		if !bytes.Equal(got, p.content) {
			t.Errorf("%s is out of date: run make docs", filepath.ToSlash(p.path))
		}
	}
}

func readPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "reference", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every key the configuration decodes, found by a walk of its own over the structs' yaml tags,
// has its heading in the configuration reference.
func TestConfigReferenceHasEveryKey(t *testing.T) {
	page := readPage(t, "configuration.md")
	var n int
	var walk func(t reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for _, f := range reflect.VisibleFields(typ) {
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			path := prefix + tag
			n++
			if !strings.Contains(page, "\n### `"+path+"`\n") {
				t.Errorf("docs/reference/configuration.md does not list %s: run make docs", path)
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Struct && ft.PkgPath() != "time":
				walk(ft, path+".")
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), path+"[].")
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				walk(ft.Elem(), path+".<name>.")
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	if n < 100 {
		t.Fatalf("walked only %d keys", n)
	}
}

// Every key says what it is: a key without a doc comment (on its field, or on its type for a
// section) fails here, naming the field to document in config/*.go.
func TestEveryConfigKeyHasDoc(t *testing.T) {
	keys, err := testKeys()
	if err != nil {
		t.Fatal(err)
	}
	// A Go name (ApplyDefaults, CleanupFor) means nothing to a reader of the file; product
	// names are written the same way.
	goName := regexp.MustCompile(`\b[A-Z][a-z]+[A-Z]\w*`)
	products := map[string]bool{"MySQL": true, "MariaDB": true, "RocketMQ": true, "NameServers": true, "CloudEvents": true, "MiB": true}
	for _, k := range keys {
		if strings.TrimSpace(k.Doc) == "" {
			t.Errorf("%s has no doc comment: document its field in config/*.go", k.Path)
		}
		for _, w := range goName.FindAllString(k.Doc, -1) {
			if !products[w] {
				t.Errorf("%s's doc names the Go identifier %s: say it in the file's terms, or move it to an \"In code\" paragraph", k.Path, w)
			}
		}
	}
}

// source.skip_checks' comment lists the check names by hand (config cannot import preflight);
// it must list them all.
func TestSkipChecksDocNamesEveryCheck(t *testing.T) {
	keys, err := testKeys()
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, k := range keys {
		if k.Path == "source.skip_checks" {
			doc = k.Doc
		}
	}
	for _, name := range preflight.CheckNames() {
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(doc) {
			t.Errorf("source.skip_checks' doc comment (config.Source.SkipChecks) does not name the check %s", name)
		}
	}
}

// Every metric name written in the metrics package's source, found by reading the source
// rather than the registry, is in the metrics reference.
func TestMetricsReferenceHasEveryMetric(t *testing.T) {
	page := readPage(t, "metrics.md")
	files, err := filepath.Glob(filepath.Join(root, "metrics", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^outboxd_[a-z0-9_]+$`)
	fset := token.NewFileSet()
	var n int
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(node ast.Node) bool {
			lit, ok := node.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !name.MatchString(s) {
				return true
			}
			n++
			if !strings.Contains(page, "| `"+s+"` |") {
				t.Errorf("docs/reference/metrics.md does not list %s: run make docs", s)
			}
			return true
		})
	}
	if n < 40 {
		t.Fatalf("found only %d metric names in metrics/*.go", n)
	}
}

// A default that follows another key is marked derived, not printed as a fixed value.
func TestDerivedDefaults(t *testing.T) {
	defaults, derived, err := configDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !derived["reconcile.window"] {
		t.Errorf("reconcile.window (default: reconcile.interval) is not marked derived")
	}
	for p, want := range map[string]string{
		"source.read_timeout": "10s", "sinks.<name>.client_id": "outboxd", "sinks.<name>.send_timeout": "3s",
		"checkpoint.path": "./data/checkpoint.json", "checkpoint.table": "outboxd.checkpoint",
		"admin.listen": "127.0.0.1:9120", "cleanup.batch": "1000", "tables[].cleanup.retention": "168h",
	} {
		if defaults[p] != want {
			t.Errorf("default of %s = %q, want %q", p, defaults[p], want)
		}
	}
}
