package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// softMemoryLimitMiB is the soft memory limit outboxd sets itself without GOMEMLIMIT: the
// constant of that name in cmd/outboxd, read from the source so this package need not import
// package main.
func softMemoryLimitMiB(t *testing.T) int {
	t.Helper()
	path := filepath.Join(repoRoot(t), "cmd", "outboxd", "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name != "softMemoryLimitMiB" || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT {
					v, err := strconv.Atoi(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
			}
		}
	}
	t.Fatalf("%s: no integer constant softMemoryLimitMiB", path)
	return 0
}

// softLimitRef is how the manifests and docs quote the soft limit, e.g. "outboxd's own soft
// limit is 224 MiB" or "a soft memory limit of 224 MiB", after comment markers and line breaks
// are folded into single spaces.
var softLimitRef = regexp.MustCompile(`(?i)soft (?:memory )?limit (?:is |of )?(\d+) ?MiB`)

// Every soft memory limit quoted in deploy/, configs/ and docs/ is the one the code sets, and
// the unit and the Kubernetes and Helm manifests quote it.
func TestMemoryFigures(t *testing.T) {
	want := softMemoryLimitMiB(t)
	root := repoRoot(t)
	quoted := map[string]bool{}
	for _, dir := range []string{"deploy", "configs", "docs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			text := strings.Join(strings.Fields(strings.NewReplacer("#", " ", "//", " ").Replace(string(data))), " ")
			rel, _ := filepath.Rel(root, path)
			for _, m := range softLimitRef.FindAllStringSubmatch(text, -1) {
				quoted[rel] = true
				if got, _ := strconv.Atoi(m[1]); got != want {
					t.Errorf("%s: %q, but cmd/outboxd sets a soft memory limit of %d MiB (softMemoryLimitMiB)", rel, m[0], want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"deploy/systemd/outboxd.service", "deploy/kubernetes/deployment.yaml", "deploy/helm/outboxd/values.yaml",
		"docs/operations/systemd.md", "docs/operations/helm.md"} {
		if !quoted[f] {
			t.Errorf("%s does not quote the soft memory limit (%d MiB)", f, want)
		}
	}
}
