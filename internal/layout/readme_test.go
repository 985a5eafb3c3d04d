package layout_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutEntry is a line of docs/development/architecture.md's blocks that names a folder.
var layoutEntry = regexp.MustCompile(`^([a-z][a-z0-9_-]*)/`)

// architecture is the page that draws the layout and the data flow.
const architecture = "docs/development/architecture.md"

// The architecture page ("Layout and data flow") names every top-level folder that holds Go
// code, and names none that does not exist: someone new reads the data flow from it.
func TestArchitectureNamesEveryPackageFolder(t *testing.T) {
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(architecture)))
	if err != nil {
		t.Fatal(err)
	}
	section, ok := strings.CutPrefix(string(page), "# Layout and data flow\n")
	if !ok {
		t.Fatalf(`%s does not start with "# Layout and data flow"`, architecture)
	}
	// The section's code blocks: the picture of the data path, then the folder list.
	named := map[string]bool{}
	for i, block := range strings.Split(section, "```") {
		if i%2 == 0 {
			continue // prose between the blocks
		}
		for _, line := range strings.Split(block, "\n") {
			if m := layoutEntry.FindStringSubmatch(line); m != nil {
				named[m[1]] = true
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if hasGo(t, filepath.Join(root, e.Name())) && !named[e.Name()] {
			t.Errorf("%s does not name %s/, which holds Go code", architecture, e.Name())
		}
		delete(named, e.Name())
	}
	for dir := range named {
		t.Errorf("%s names %s/, which does not exist", architecture, dir)
	}
}

// hasGo reports whether dir or a folder below it holds a .go file.
func hasGo(t *testing.T, dir string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
