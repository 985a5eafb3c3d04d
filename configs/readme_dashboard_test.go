package configs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboardPage is the page that describes the Grafana dashboard.
const dashboardPage = "docs/operations/monitoring.md"

// rowsSentence is the page's "It has N rows:" above the dashboard's row table.
var rowsSentence = regexp.MustCompile(`It has (\w+) rows:\n\n\| row \| panels \|\n\|---\|---\|\n((?:\|.*\n)+)`)

// The dashboard page says how many rows the dashboard has and lists them: the
// number and the table's first column are the dashboard's rows, in its order.
func TestDocsDashboardRows(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("grafana", "outboxd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(dashboardPage)))
	if err != nil {
		t.Fatal(err)
	}
	m := rowsSentence.FindSubmatch(readme)
	if m == nil {
		t.Fatalf(`%s has no "It has N rows:" followed by the | row | panels | table`, dashboardPage)
	}
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}
	if n := slices.Index(words, string(m[1])); n != len(rows) {
		t.Errorf("%s says the dashboard has %s rows; it has %d: %q", dashboardPage, m[1], len(rows), rows)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(m[2])), "\n") {
		listed = append(listed, strings.TrimSpace(strings.Split(line, "|")[1]))
	}
	if !slices.Equal(listed, rows) {
		t.Errorf("%s's row table lists %q; the dashboard's rows are %q", dashboardPage, listed, rows)
	}
}
