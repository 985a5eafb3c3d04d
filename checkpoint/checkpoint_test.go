package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/gtid"
)

const u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

func openT(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "cp.json")
	s := openT(t, path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("parent directories not created: %v", err)
	}

	got, err := s.Load(t.Context())
	if err != nil || got != nil {
		t.Fatalf("Load before any Save = %v, %v; want nil, nil", got, err)
	}

	want := Checkpoint{
		Flavor:     gtid.MySQL,
		GTIDSet:    u1 + ":1-13:mytag:1-2,\n57b70f4e-20c8-11ef-8d33-0242ac110002:5",
		File:       "binlog.000042",
		Pos:        4711,
		CommitTime: time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC),
		SavedAt:    time.Date(2025, 3, 1, 12, 0, 1, 0, time.UTC),
	}
	if err := s.Save(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	got, err = s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.Flavor != want.Flavor || got.GTIDSet != want.GTIDSet || got.File != want.File || got.Pos != want.Pos ||
		!got.CommitTime.Equal(want.CommitTime) || !got.SavedAt.Equal(want.SavedAt) {
		t.Fatalf("Load = %+v, want %+v", *got, want)
	}
	set, err := got.Set()
	if err != nil || set.String() != want.GTIDSet {
		t.Fatalf("Set() = %q, %v", set, err)
	}

	// Read works without the lock while the Store holds it.
	r, err := Read(path)
	if err != nil || r == nil || r.GTIDSet != want.GTIDSet {
		t.Fatalf("Read = %+v, %v", r, err)
	}

	// A second Save replaces the first; zero SavedAt is stamped; empty optional fields are omitted.
	before := time.Now()
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-42,10-1-7"}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.GTIDSet != "0-1-42,10-1-7" || got.Flavor != gtid.MariaDB || got.SavedAt.Before(before.Add(-time.Second)) {
		t.Fatalf("second Load = %+v", *got)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"binlog_file", "binlog_pos", "commit_time"} {
		if _, ok := fields[k]; ok {
			t.Errorf("empty %s written: %s", k, raw)
		}
	}
	for _, k := range []string{"flavor", "gtid_set", "saved_at"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("%s missing: %s", k, raw)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("checkpoint mode = %v, %v; want 0644", fi.Mode(), err)
	}
}

func TestSaveLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.json")
	s := openT(t, path)
	for i := range 5 {
		if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: fmt.Sprintf("0-1-%d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := dirNames(t, dir), []string{"cp.json", "cp.json.lock"}; !slices.Equal(got, want) {
		t.Fatalf("directory holds %q, want %q", got, want)
	}
}

func TestSaveFailureKeepsNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.json")
	s := openT(t, path)
	// A directory in the checkpoint's place makes the rename fail after the temp file is written.
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-1"})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Save over a directory: %v", err)
	}
	if got, want := dirNames(t, dir), []string{"cp.json", "cp.json.lock"}; !slices.Equal(got, want) {
		t.Fatalf("directory holds %q after failed Save, want %q", got, want)
	}
}

// The file store's failed write carries its own fix, the directory; a refused checkpoint,
// which no directory fixes, carries none.
func TestFileSaveFailureCarriesItsFix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	s := openT(t, path)
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-1"})
	if fix := Fix(err); !strings.Contains(fix, "make the checkpoint's directory writable") {
		t.Fatalf("Fix(%v) = %q, want the directory", err, fix)
	}
	if strings.Contains(err.Error(), "writable") {
		t.Fatalf("Save = %q: the fix is for the caller to word, not in the text", err)
	}
	err = s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "not a set"})
	if err == nil || Fix(err) != "" {
		t.Fatalf("refused save: err %v, Fix %q, want an error without a fix", err, Fix(err))
	}
}

func TestLeftoverTempFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MySQL, GTIDSet: u1 + ":1-5"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a crash between CreateTemp and rename leaves: a partial temp file.
	stale := path + tempInfix + "123456"
	if err := os.WriteFile(stale, []byte(`{"flavor":"mysql","gtid_se`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Read(path)
	if err != nil || c == nil || c.GTIDSet != u1+":1-5" {
		t.Fatalf("Read with a stale temp file = %+v, %v", c, err)
	}
	s = openT(t, path)
	c, err = s.Load(t.Context())
	if err != nil || c == nil || c.GTIDSet != u1+":1-5" {
		t.Fatalf("Load with a stale temp file = %+v, %v", c, err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open did not remove the stale temp file: %v", err)
	}

	// A crash before the first rename: only a temp file, no checkpoint yet.
	dir2 := t.TempDir()
	path2 := filepath.Join(dir2, "cp.json")
	if err := os.WriteFile(path2+tempInfix+"9", []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Read(path2); c != nil || err != nil {
		t.Fatalf("Read with only a temp file = %+v, %v; want nil, nil", c, err)
	}
}

func TestSecondOpenFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err == nil {
		_ = s2.Close()
		t.Fatal("second Open succeeded while the first holds the lock")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "another process holds") {
		t.Fatalf("second Open error = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s3, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	_ = s3.Close()
}

const helperEnv = "CHECKPOINT_TEST_OPEN_PATH"

// TestHelperOpen is run in a child process by TestSecondOpenFailsAcrossProcesses: it tries to Open
// the path and reports the outcome in its exit code (0 opened, 3 locked, 1 other error).
func TestHelperOpen(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper for TestSecondOpenFailsAcrossProcesses")
	}
	s, err := Open(path)
	switch {
	case errors.Is(err, ErrLocked):
		os.Exit(3)
	case err != nil:
		os.Exit(1)
	}
	_ = s.Close()
	os.Exit(0)
}

func TestSecondOpenFailsAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	child := func() int {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOpen$", "-test.timeout=30s")
		cmd.Env = append(os.Environ(), helperEnv+"="+path)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("run child: %v: %s", err, out)
		}
		return 0
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if code := child(); code != 3 {
		t.Fatalf("child Open while locked exited %d, want 3 (locked)", code)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code := child(); code != 0 {
		t.Fatalf("child Open after Close exited %d, want 0", code)
	}
}

func TestCorruptFile(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"empty", "", "corrupt file"},
		{"truncated", `{"flavor":"mysql","gtid_set":"`, "corrupt file"},
		{"not json", "hello", "corrupt file"},
		{"array", `[1,2]`, "corrupt file"},
		{"trailing data", `{"flavor":"mariadb","gtid_set":"0-1-1","saved_at":"2025-01-01T00:00:00Z"} {}`, "data after the JSON object"},
		{"unknown field", `{"flavor":"mariadb","gtid_set":"0-1-1","gtid":"x"}`, `unknown field "gtid"`},
		{"bad flavor", `{"flavor":"postgres","gtid_set":""}`, `unknown flavor "postgres"`},
		{"missing flavor", `{"gtid_set":"0-1-1"}`, `unknown flavor ""`},
		{"bad gtid set", `{"flavor":"mariadb","gtid_set":"0-1-x"}`, `bad sequence number "x"`},
		{"wrong flavor's gtid", `{"flavor":"mariadb","gtid_set":"` + u1 + `:1"}`, "want domain-server-sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			s := openT(t, path)
			c, err := s.Load(t.Context())
			if err == nil {
				t.Fatalf("Load = %+v, want error", c)
			}
			for _, sub := range []string{path, tt.want} {
				if !strings.Contains(err.Error(), sub) {
					t.Errorf("error %q does not contain %q", err, sub)
				}
			}
			if _, rerr := Read(path); rerr == nil {
				t.Error("Read accepted what Load rejected")
			}
		})
	}
}

func TestSaveRejectsInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	s := openT(t, path)
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-5"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Checkpoint{
		{Flavor: "postgres", GTIDSet: ""},
		{Flavor: gtid.MySQL, GTIDSet: "0-1-6"},
		{Flavor: gtid.MariaDB, GTIDSet: "0-1-6,0-1-7"},
	} {
		if err := s.Save(t.Context(), c); err == nil || !strings.Contains(err.Error(), "refuse to save") {
			t.Errorf("Save(%+v) = %v, want refusal", c, err)
		}
	}
	c, err := s.Load(t.Context())
	if err != nil || c.GTIDSet != "0-1-5" {
		t.Fatalf("checkpoint after refused saves = %+v, %v", c, err)
	}
}

func TestUseAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(t.Context(), Checkpoint{Flavor: gtid.MariaDB, GTIDSet: "0-1-5"}); err == nil {
		t.Error("Save after Close succeeded")
	}
	if _, err := s.Load(t.Context()); err == nil {
		t.Error("Load after Close succeeded")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Save after Close wrote the file: %v", err)
	}
}

func TestOpenEmptyPath(t *testing.T) {
	if _, err := Open(""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
}

func TestReadMissing(t *testing.T) {
	c, err := Read(filepath.Join(t.TempDir(), "nope", "cp.json"))
	if c != nil || err != nil {
		t.Fatalf("Read of a missing file = %+v, %v; want nil, nil", c, err)
	}
}
