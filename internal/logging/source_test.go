package logging

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every log field of outboxd's own code has its unit in its value: no zerolog Dur/Durs/TimeDiff
// (an integer whose unit is the global DurationFieldUnit), no Time/Times (the global
// TimeFieldFormat, whole seconds by default) and no Timestamp (the same global; New writes the
// time). Use Stringer(key, d) for a duration and Str(key, Time(t)) for a time. The check is by
// syntax over the module's non-test Go files: a zerolog field method is a selector call with a
// string-literal key.
func TestNoUnitlessLogFields(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	banned := map[string]string{
		"Dur": "Stringer(key, d)", "Durs": "Strs with d.String()", "TimeDiff": "Stringer(key, t.Sub(start))",
		"Time": "Str(key, logging.Time(t))", "Times": "Strs with logging.Time",
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "vendor" || (strings.HasPrefix(n, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			if name == "Timestamp" && len(call.Args) == 0 && isLoggerChain(sel.X) {
				t.Errorf("%s: .Timestamp() writes the time in zerolog's global format; build the logger with logging.New", fset.Position(call.Pos()))
			}
			if use, ok := banned[name]; ok && len(call.Args) == 2 {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					t.Errorf("%s: .%s(%s, ...) logs without a unit; use %s", fset.Position(call.Pos()), name, lit.Value, use)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("only %d Go files found under %s: the walk is not seeing the module", files, root)
	}
}

// isLoggerChain reports whether x is a call chain such as l.With() or log.Info(), the
// receivers Timestamp is a zerolog method on.
func isLoggerChain(x ast.Expr) bool {
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch sel.Sel.Name {
	case "With", "Info", "Debug", "Warn", "Error", "Trace", "Log", "WithLevel", "Err":
		return true
	}
	return isLoggerChain(sel.X)
}
