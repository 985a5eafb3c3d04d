package doccheck_test

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/doccheck"
)

// root is the repository, from this package's folder.
const root = "../.."

// pendingPages are pages that links may name before they exist: other slices of issue 23 write
// them. Links to them are not checked. Empty this list once they are merged.
var pendingPages = []string{}

// RunbookBase is where every alert's runbook_url points: an anchor of docs/operations/runbook.md.
const RunbookBase = "https://github.com/outboxd/outboxd/blob/main/docs/operations/runbook.md#"

// pages returns README.md and every Markdown file under docs/, as paths relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every relative link of README.md and docs/ names a file or folder that exists, and every
// #anchor one of the target page's headings (GitHub's slugs), so a reader never lands nowhere.
func TestDocsLinksResolve(t *testing.T) {
	anchors := map[string][]string{}
	all := pages(t)
	for _, p := range all {
		anchors[p] = doccheck.Anchors(read(t, p))
	}
	for _, p := range all {
		for _, l := range doccheck.Links(read(t, p)) {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(l.Target, "#")
			target := p
			if file != "" {
				target = path.Clean(path.Join(path.Dir(p), file))
			}
			if slices.Contains(pendingPages, target) {
				continue
			}
			if strings.HasPrefix(target, "../") {
				t.Errorf("%s:%d: link %q leaves the repository", p, l.Line, l.Target)
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", p, l.Line, l.Target, target)
				continue
			}
			if anchor == "" {
				continue
			}
			a, ok := anchors[target]
			if !ok {
				t.Errorf("%s:%d: link %q has an anchor into %s, which is not a checked Markdown page", p, l.Line, l.Target, target)
			} else if !slices.Contains(a, anchor) {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", p, l.Line, l.Target, target, anchor)
			}
		}
	}
}

// The pending pages do not exist yet: once one does, it must leave the list so its links are
// checked.
func TestPendingPagesArePending(t *testing.T) {
	for _, p := range pendingPages {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err == nil {
			t.Errorf("%s exists: remove it from pendingPages", p)
		}
	}
}

// runbookURL finds runbook_url values in the Prometheus rule files and their unit tests.
var runbookURL = regexp.MustCompile(`runbook_url:\s*["']?([^"'\s]+)`)

// Every runbook_url in configs/prometheus/*.yml (the rules and the promtool tests that expect
// them) points at a heading of docs/operations/runbook.md.
func TestRunbookURLs(t *testing.T) {
	anchors := doccheck.Anchors(read(t, "docs/operations/runbook.md"))
	files, err := filepath.Glob(filepath.Join(root, "configs", "prometheus", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range runbookURL.FindAllStringSubmatch(string(b), -1) {
			n++
			anchor, ok := strings.CutPrefix(m[1], RunbookBase)
			if !ok {
				t.Errorf("%s: runbook_url %q does not start with %s", filepath.Base(f), m[1], RunbookBase)
			} else if !slices.Contains(anchors, anchor) {
				t.Errorf("%s: runbook_url %q: docs/operations/runbook.md has no heading with anchor #%s", filepath.Base(f), m[1], anchor)
			}
		}
	}
	if n == 0 {
		t.Error("no runbook_url found in configs/prometheus/*.yml")
	}
}

// README.md stays a landing page (one or two screens of what it is, the guarantees, the demo,
// install, the top limits and links), and docs/index.md links every page under docs/, so a page
// nobody can find from the index is a test failure rather than a surprise.
func TestReadmeIsALandingPageAndIndexListsEveryPage(t *testing.T) {
	if n := strings.Count(read(t, "README.md"), "\n"); n >= 300 {
		t.Errorf("README.md has %d lines; keep it under 300 and move the rest to a page under docs/", n)
	}
	listed := map[string]bool{}
	for _, l := range doccheck.Links(read(t, "docs/index.md")) {
		file, _, _ := strings.Cut(l.Target, "#")
		listed[path.Clean(path.Join("docs", file))] = true
	}
	for _, p := range pages(t) {
		if strings.HasPrefix(p, "docs/") && p != "docs/index.md" && !listed[p] {
			t.Errorf("docs/index.md does not link %s", p)
		}
	}
	for _, p := range pendingPages {
		if !listed[p] {
			t.Errorf("docs/index.md does not link %s, which another slice writes", p)
		}
	}
}
