package release_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/outboxd/outboxd/internal/release"
)

const (
	testVersion = "v9.8.7-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// TestReleaseBuild runs the whole release build (all three platforms, as `make release` does)
// into a temp dir and checks what a user downloads: each binary is static and for its platform,
// the linux/amd64 one reports the stamped version and commit, SHA256SUMS matches every file, and
// the image tarball reads back as an OCI layout with a linux/amd64 and a linux/arm64 image
// that run the binary as a non-root user with the CA bundle and that user's passwd entry.
func TestReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the release build compiles outboxd for three platforms (minutes on a cold build cache)")
	}
	if _, err := os.Stat(release.CABundle); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: the image takes the build machine's CA bundle; scripts/install-deps.sh installs ca-certificates", err)
		}
		t.Skipf("%v: install ca-certificates (scripts/install-deps.sh does)", err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := release.Build(ctx, release.Options{
		Version: testVersion, Commit: testCommit, Created: time.Unix(1_700_000_000, 0),
		Source: filepath.Join("..", ".."), Out: out, Log: tWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("release build took %s", time.Since(start).Round(time.Second))

	// SHA256SUMS lists every other file of the directory, with its hash.
	sums := readSums(t, res.Sums)
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != release.SumsFile {
			names = append(names, e.Name())
		}
	}
	want := []string{release.ImageName(testVersion)}
	for _, p := range release.Platforms() {
		want = append(want, release.ArchiveName(testVersion, p))
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("release directory holds %v, want %v", names, want)
	}
	if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, want) {
		t.Errorf("SHA256SUMS lists %v, want %v", got, want)
	}
	for name, sum := range sums {
		if got := sha256File(t, filepath.Join(out, name)); got != sum {
			t.Errorf("SHA256SUMS says %s for %s; the file's SHA-256 is %s", sum, name, got)
		}
	}

	// Each archive: the binary for its platform, and the README.
	bins := map[release.Platform][]byte{}
	for _, p := range release.Platforms() {
		files := readTar(t, filepath.Join(out, release.ArchiveName(testVersion, p)))
		dir := strings.TrimSuffix(release.ArchiveName(testVersion, p), ".tar.gz") + "/"
		bin, ok := files[dir+"outboxd"]
		if !ok || bin.mode&0o111 == 0 {
			t.Fatalf("%s: no executable %soutboxd (has %v)", p, dir, slices.Sorted(maps.Keys(files)))
		}
		if _, ok := files[dir+"README.md"]; !ok {
			t.Errorf("%s: no %sREADME.md", p, dir)
		}
		checkBinary(t, p, bin.body)
		bins[p] = bin.body
	}

	// The linux/amd64 binary runs and reports what was stamped.
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		path := filepath.Join(t.TempDir(), "outboxd")
		if err := os.WriteFile(path, bins[release.Platform{OS: "linux", Arch: "amd64"}], 0o755); err != nil {
			t.Fatal(err)
		}
		v, err := exec.Command(path, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(v), testVersion) || !strings.Contains(string(v), "commit "+testCommit) {
			t.Errorf("outboxd version: %q (err %v); want the version %s and commit %s", v, err, testVersion, testCommit)
		}
	} else {
		t.Logf("not running the linux/amd64 binary on %s/%s", runtime.GOOS, runtime.GOARCH)
	}

	checkImage(t, res.Image, bins)
}

// checkBinary checks that bin is a static executable for p.
func checkBinary(t *testing.T, p release.Platform, bin []byte) {
	t.Helper()
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: not ELF: %v", p, err)
		}
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Arch]
		if f.Machine != machine || f.Type != elf.ET_EXEC {
			t.Errorf("%s: ELF machine %s type %s, want %s ET_EXEC", p, f.Machine, f.Type, machine)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("%s: the binary is dynamically linked (%s); want static (CGO_ENABLED=0)", p, prog.Type)
			}
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: not Mach-O: %v", p, err)
		}
		if f.Cpu != macho.CpuArm64 || f.Type != macho.TypeExec {
			t.Errorf("%s: Mach-O cpu %s type %s, want arm64 executable", p, f.Cpu, f.Type)
		}
	default:
		t.Fatalf("no check for %s", p)
	}
}

// checkImage reads the image tarball back as an OCI layout and checks the index, each image's
// config and its files.
func checkImage(t *testing.T, path string, bins map[release.Platform][]byte) {
	t.Helper()
	dir := t.TempDir()
	for name, f := range readTar(t, path) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if f.dir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("the image tarball is no OCI layout: %v", err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1 (the multi-arch index)", len(rm.Manifests))
	}
	if got, want := rm.Manifests[0].Annotations["io.containerd.image.name"], release.Repository+":"+testVersion; got != want {
		t.Errorf("index.json names the image %q, want %q", got, want)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		p := release.Platform{OS: d.Platform.OS, Arch: d.Platform.Architecture}
		platforms = append(platforms, p.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImageConfig(t, p, img)
		checkImageFiles(t, p, img, bins[p])
	}
	slices.Sort(platforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("the image index has %v, want %v", platforms, want)
	}
}

func checkImageConfig(t *testing.T, p release.Platform, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.OS || cf.Architecture != p.Arch {
		t.Errorf("%s: config is for %s/%s", p, cf.OS, cf.Architecture)
	}
	if c.User == "" || strings.HasPrefix(c.User, "0") || strings.HasPrefix(c.User, "root") {
		t.Errorf("%s: User %q, want a non-root uid", p, c.User)
	}
	if uid, _, _ := strings.Cut(c.User, ":"); uid != "65532" {
		t.Errorf("%s: User %q, want uid %d", p, c.User, release.UID)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/outboxd"}) {
		t.Errorf("%s: Entrypoint %q", p, c.Entrypoint)
	}
	if !slices.Equal(c.Cmd, []string{"run", "--config", "/etc/outboxd/outboxd.yaml"}) {
		t.Errorf("%s: Cmd %q", p, c.Cmd)
	}
	if _, ok := c.ExposedPorts["9120/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("%s: ExposedPorts %v, want the admin port 9120/tcp", p, c.ExposedPorts)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testCommit,
		"org.opencontainers.image.source":   release.Source,
	} {
		if c.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", p, k, c.Labels[k], v)
		}
	}
}

func checkImageFiles(t *testing.T, p release.Platform, img v1.Image, bin []byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := tarFiles(t, rc)
	b, ok := files["usr/local/bin/outboxd"]
	if !ok || b.mode&0o111 == 0 {
		t.Fatalf("%s: no executable usr/local/bin/outboxd in the image", p)
	}
	if !bytes.Equal(b.body, bin) {
		t.Errorf("%s: the image's binary differs from the archive's", p)
	}
	checkBinary(t, p, b.body)
	ca, err := os.ReadFile(release.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	if f := files["etc/ssl/certs/ca-certificates.crt"]; len(f.body) == 0 || !bytes.Equal(f.body, ca) {
		t.Errorf("%s: etc/ssl/certs/ca-certificates.crt missing or not the build machine's bundle (%d bytes)", p, len(f.body))
	}
	if !strings.Contains(string(files["etc/passwd"].body), "\nnonroot:x:65532:65532:") {
		t.Errorf("%s: etc/passwd has no nonroot user 65532:\n%s", p, files["etc/passwd"].body)
	}
	if !strings.Contains(string(files["etc/group"].body), "\nnonroot:x:65532:") {
		t.Errorf("%s: etc/group has no nonroot group 65532:\n%s", p, files["etc/group"].body)
	}
	if d, ok := files["var/lib/outboxd"]; !ok || d.uid != release.UID {
		t.Errorf("%s: var/lib/outboxd missing or not owned by %d", p, release.UID)
	}
}

type tarEntry struct {
	body []byte
	mode int64
	uid  int
	dir  bool
}

func tarFiles(t *testing.T, r io.Reader) map[string]tarEntry {
	t.Helper()
	files := map[string]tarEntry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		} else if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		files[name] = tarEntry{body: b, mode: h.Mode, uid: h.Uid, dir: h.Typeflag == tar.TypeDir}
	}
}

// readTar reads the tar at path, gunzipping it first when its name ends in .gz.
func readTar(t *testing.T, path string) map[string]tarEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return tarFiles(t, r)
}

// readSums parses a sha256sum-format file into name → hex hash.
func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok || len(sum) != 64 || !strings.HasSuffix(line, "\n") {
			t.Fatalf("SHA256SUMS line %q is not `HASH  NAME` and a newline", line)
		}
		sums[name] = sum
	}
	return sums
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tWriter sends the build's progress lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
