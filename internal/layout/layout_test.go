// Package layout_test keeps the module's import layout (issue 22): config is a leaf that
// reads YAML without pulling a database or broker client, and the consumer kit, which users
// embed in their own services, does not depend on the daemon's sinks.
package layout_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/outboxd/outboxd"

// pkg is the part of `go list -json` these tests read.
type pkg struct {
	ImportPath                         string
	Standard                           bool
	Imports, TestImports, XTestImports []string
}

// goList runs `go list -json args...` and decodes its stream of packages.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no go command on PATH; the layout tests run `go list`")
		}
		t.Skip("no go command on PATH; the layout tests run `go list`")
	}
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var ps []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return ps
		} else if err != nil {
			t.Fatalf("go list %s: decoding its output: %v", strings.Join(args, " "), err)
		}
		ps = append(ps, p)
	}
}

// TestConfigIsLeaf: config imports only the standard library, the YAML decoder, gtid (with
// what gtid itself needs) and small internal leaves, so that `outboxd check`'s config
// validation, and any tool that reads outboxd's config, link no MySQL or RocketMQ client.
// gtid keeps its own GTID representation for that reason: no go-mysql package may reach config,
// not even through gtid.
func TestConfigIsLeaf(t *testing.T) {
	gtidDeps := map[string]bool{}
	for _, p := range goList(t, "-deps", module+"/gtid") {
		gtidDeps[p.ImportPath] = true
	}
	for _, p := range goList(t, "-deps", module+"/config") {
		path := p.ImportPath
		banned := false
		for _, prefix := range []string{"github.com/go-sql-driver/", "github.com/apache/rocketmq-client-go", "github.com/go-mysql-org/go-mysql"} {
			if strings.HasPrefix(path, prefix) {
				t.Errorf("config depends on %s; move what config borrows from its importer into config, gtid or a small internal leaf, and convert to the client's types on the client's side", path)
				banned = true
			}
		}
		switch {
		case banned, p.Standard, gtidDeps[path], path == module+"/config", path == "go.yaml.in/yaml/v3":
		case strings.HasPrefix(path, module+"/internal/"):
			for _, imp := range p.Imports {
				if !isStd(imp) {
					t.Errorf("config imports %s, which imports %s: an internal package config uses must be a leaf (standard library only)", path, imp)
				}
			}
		default:
			t.Errorf("config depends on %s; config may import only the standard library, go.yaml.in/yaml/v3, gtid and internal leaves", path)
		}
	}
}

// TestConsumerKitIndependentOfSinks: nothing under consumer/ imports a package under sink/,
// tests included, so the kit's users do not link the daemon's producers and a sink can
// change without breaking them. What both need (the wire format) lives in internal/.
func TestConsumerKitIndependentOfSinks(t *testing.T) {
	for _, p := range goList(t, module+"/consumer/...") {
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if imp == module+"/sink" || strings.HasPrefix(imp, module+"/sink/") {
				t.Errorf("%s imports %s; share what it needs through a package under internal/", p.ImportPath, imp)
			}
		}
	}
}

// isStd reports whether path is in the standard library: its first element has no dot.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}
