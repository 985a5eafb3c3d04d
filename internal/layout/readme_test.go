package layout_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutEntry is a line of the README's "Layout and data flow" block that names a folder.
var layoutEntry = regexp.MustCompile(`^([a-z][a-z0-9_-]*)/`)

// The README's "Layout and data flow" names every top-level folder that holds Go code, and
// names none that does not exist: someone new reads the data flow from it.
func TestReadmeLayoutNamesEveryPackageFolder(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## Layout and data flow\n")
	if !ok {
		t.Fatal(`README.md has no "## Layout and data flow" section`)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
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
			t.Errorf("README.md's layout does not name %s/, which holds Go code", e.Name())
		}
		delete(named, e.Name())
	}
	for dir := range named {
		t.Errorf("README.md's layout names %s/, which does not exist", dir)
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
