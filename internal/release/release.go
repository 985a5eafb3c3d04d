// Package release builds what `make release` ships: a static outboxd binary per platform in a
// tar.gz with the README, an OCI image tarball holding one image per Linux platform under a
// multi-arch index, and a SHA256SUMS file over all of them. The image is assembled from files
// (the binary, the CA bundle of the build machine, a passwd and group with a non-root user), so
// building it needs neither a Docker engine nor a base image to pull.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/outboxd/outboxd/config"
)

// What the image is and how it runs; deploy/kubernetes refers to the same user and name.
const (
	// Repository is where released images are published; the image tarball names its index
	// Repository:<version>, so `docker load` tags it so.
	Repository = "ghcr.io/outboxd/outboxd"
	// Source is the repository the image's org.opencontainers.image.source label points at.
	Source = "https://github.com/outboxd/outboxd"
	// UID and GID of the image's non-root user "nonroot" (distroless's numbers, which the
	// Dockerfile's image also runs as).
	UID = 65532
	GID = 65532
	// BinaryPath is the image's entrypoint.
	BinaryPath = "/usr/local/bin/outboxd"
	// ConfigPath is where the image's default command reads its config.
	ConfigPath = "/etc/outboxd/outboxd.yaml"
	// CABundle is where the image's CA certificates are, where Go's crypto/x509 looks first on
	// Linux; it is also the build machine's bundle that is copied (Debian's ca-certificates).
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// SumsFile is the checksum file's name, in the format `sha256sum -c` reads.
	SumsFile = "SHA256SUMS"
)

// Platform is a GOOS/GOARCH pair a binary is built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Platforms returns the platforms a release ships binaries for; the Linux ones also get an image.
func Platforms() []Platform {
	return []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}}
}

// Options says what to build and where.
type Options struct {
	// Version and Commit are stamped into the binaries and the image labels; Version also names
	// the files and tags the image, so it must be a valid image tag (e.g. v1.2.0).
	Version, Commit string
	// Created is the time given to every file in the archives and to the image (the commit's
	// time makes a release reproducible); zero means the Unix epoch.
	Created time.Time
	// Source is the module root to build from; Out the directory the artifacts are written to
	// (created if missing).
	Source, Out string
	// Platforms defaults to Platforms().
	Platforms []Platform
	// CABundle is the CA certificate file copied into the image; defaults to CABundle.
	CABundle string
	// Go is the go command; defaults to "go".
	Go string
	// Log receives a line per step; nil discards them.
	Log io.Writer
}

// Result lists the files Build wrote, each a path under Options.Out.
type Result struct {
	Archives []string
	Image    string
	Sums     string
}

// validTag is the OCI distribution spec's tag grammar.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// LDFlags returns the -ldflags that stamp version and commit into cmd/outboxd and strip the
// symbol table (what `make build` passes too).
func LDFlags(version, commit string) string {
	return fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", version, commit)
}

// ArchiveName is the file name of the binary archive for p.
func ArchiveName(version string, p Platform) string {
	return fmt.Sprintf("outboxd_%s_%s_%s.tar.gz", version, p.OS, p.Arch)
}

// ImageName is the file name of the OCI image tarball.
func ImageName(version string) string { return fmt.Sprintf("outboxd_%s_oci.tar", version) }

// Build compiles cmd/outboxd for each platform (CGO_ENABLED=0, -trimpath), writes the archives,
// the image tarball and SHA256SUMS into o.Out, and returns their paths. It blocks until done or
// ctx is cancelled. On error some artifacts may have been written but SHA256SUMS is not, so a
// partial release cannot pass for a whole one.
func Build(ctx context.Context, o Options) (Result, error) {
	if !validTag.MatchString(o.Version) {
		return Result{}, fmt.Errorf("version %q is not a valid image tag: use letters, digits, '_', '.' and '-' (e.g. v1.2.0)", o.Version)
	}
	if o.Commit == "" {
		return Result{}, errors.New("commit is empty: pass the commit the release is built from (git rev-parse HEAD)")
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms()
	}
	if o.CABundle == "" {
		o.CABundle = CABundle
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0)
	}
	o.Created = o.Created.UTC()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Result{}, err
	}
	// A SHA256SUMS left from an earlier run would vouch for files this run may not rewrite.
	if err := os.Remove(filepath.Join(o.Out, SumsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Result{}, err
	}
	stage, err := os.MkdirTemp("", "outboxd-release-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(stage)

	var res Result
	var images []platformImage
	for _, p := range o.Platforms {
		bin := filepath.Join(stage, p.OS+"_"+p.Arch, "outboxd")
		start := time.Now()
		if err := compile(ctx, o, p, bin); err != nil {
			return Result{}, err
		}
		fmt.Fprintf(o.Log, "built %s in %s\n", p, time.Since(start).Round(100*time.Millisecond))
		archive := filepath.Join(o.Out, ArchiveName(o.Version, p))
		if err := writeArchive(o, p, bin, archive); err != nil {
			return Result{}, fmt.Errorf("archive for %s: %w", p, err)
		}
		res.Archives = append(res.Archives, archive)
		if p.OS == "linux" {
			images = append(images, platformImage{p, bin})
		}
	}
	if len(images) > 0 {
		res.Image = filepath.Join(o.Out, ImageName(o.Version))
		if err := writeImage(o, images, stage, res.Image); err != nil {
			return Result{}, fmt.Errorf("image: %w", err)
		}
		fmt.Fprintf(o.Log, "wrote %s\n", res.Image)
	}
	res.Sums = filepath.Join(o.Out, SumsFile)
	if err := writeSums(res.Sums, append(slices.Clone(res.Archives), res.Image)); err != nil {
		return Result{}, err
	}
	return res, nil
}

// compile builds cmd/outboxd for p into bin.
func compile(ctx context.Context, o Options, p Platform, bin string) error {
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-ldflags", LDFlags(o.Version, o.Commit), "-o", bin, "./cmd/outboxd")
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, stderr.Bytes())
	}
	return nil
}

// file is one entry of a tar written by writeTar: a directory when its Name ends in "/".
type file struct {
	Name     string
	Mode     int64
	UID, GID int
	Body     []byte
}

// writeTar writes files as a tar stream with every time set to mtime and no user or group names,
// so the same inputs give the same bytes.
func writeTar(w io.Writer, files []file, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: mtime, Format: tar.FormatPAX}
		if strings.HasSuffix(f.Name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.Body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeArchive writes the tar.gz users download for p: a directory named after the archive
// holding the binary and the docs.
func writeArchive(o Options, p Platform, bin, path string) error {
	dir := strings.TrimSuffix(ArchiveName(o.Version, p), ".tar.gz") + "/"
	body, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	files := []file{{Name: dir, Mode: 0o755}, {Name: dir + "outboxd", Mode: 0o755, Body: body}}
	for _, doc := range []string{"LICENSE", "README.md"} {
		b, err := os.ReadFile(filepath.Join(o.Source, doc))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		files = append(files, file{Name: dir + doc, Mode: 0o644, Body: b})
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := writeTar(zw, files, o.Created); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

type platformImage struct {
	Platform
	bin string
}

// Passwd and Group are the image's /etc/passwd and /etc/group: root, nobody and the user the
// image runs as (so tools that look the uid up find a name and a home).
const (
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
)

// image assembles the image for one platform from three layers: the CA bundle, the users (with
// the home and checkpoint directories they own) and the binary. The first two are the same
// bytes for every platform, so registries store them once.
func image(o Options, pi platformImage, ca []byte) (v1.Image, error) {
	bin, err := os.ReadFile(pi.bin)
	if err != nil {
		return nil, err
	}
	layers := []struct {
		files     []file
		createdBy string
	}{
		{[]file{
			{Name: "etc/", Mode: 0o755}, {Name: "etc/ssl/", Mode: 0o755}, {Name: "etc/ssl/certs/", Mode: 0o755},
			{Name: strings.TrimPrefix(CABundle, "/"), Mode: 0o644, Body: ca},
		}, "CA certificates from " + o.CABundle},
		{[]file{
			{Name: "etc/", Mode: 0o755},
			{Name: "etc/passwd", Mode: 0o644, Body: []byte(Passwd)},
			{Name: "etc/group", Mode: 0o644, Body: []byte(Group)},
			{Name: "home/", Mode: 0o755}, {Name: "home/nonroot/", Mode: 0o700, UID: UID, GID: GID},
			{Name: "tmp/", Mode: 0o1777},
			// The default checkpoint directory of the container deployments (a volume mounted
			// here starts as a copy of it, owned by the user).
			{Name: "var/", Mode: 0o755}, {Name: "var/lib/", Mode: 0o755}, {Name: "var/lib/outboxd/", Mode: 0o755, UID: UID, GID: GID},
		}, "users root, nobody and nonroot (65532)"},
		{[]file{
			{Name: "usr/", Mode: 0o755}, {Name: "usr/local/", Mode: 0o755}, {Name: "usr/local/bin/", Mode: 0o755},
			{Name: strings.TrimPrefix(BinaryPath, "/"), Mode: 0o755, Body: bin},
		}, "outboxd " + o.Version + " for " + pi.String()},
	}
	var variant string
	if pi.Arch == "arm64" {
		variant = "v8"
	}
	created := v1.Time{Time: o.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: pi.Arch, OS: pi.OS, Variant: variant, Created: created,
		Config: v1.Config{
			User:         fmt.Sprintf("%d:%d", UID, GID),
			Entrypoint:   []string{BinaryPath},
			Cmd:          []string{"run", "--config", ConfigPath},
			Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			WorkingDir:   "/",
			ExposedPorts: map[string]struct{}{AdminPort() + "/tcp": {}},
			Labels:       Labels(o.Version, o.Commit),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		var buf bytes.Buffer
		if err := writeTar(&buf, l.files, o.Created); err != nil {
			return nil, err
		}
		b := buf.Bytes()
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: created, CreatedBy: l.createdBy}})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}

// AdminPort is the port of config's default admin.listen, which the image exposes.
func AdminPort() string {
	_, port, _ := strings.Cut(config.DefaultAdminListen, ":")
	return port
}

// Labels returns the image's labels (also the index's annotations).
func Labels(version, commit string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "outboxd",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.source":   Source,
	}
}

// writeImage writes an OCI image layout holding the multi-arch index of images as a tar at path.
func writeImage(o Options, images []platformImage, stage, path string) error {
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return fmt.Errorf("reading the CA certificates for the image: %w (on Debian or Ubuntu: apt-get install ca-certificates)", err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		img, err := image(o, pi, ca)
		if err != nil {
			return fmt.Errorf("%s: %w", pi, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: cf.Platform()}})
	}
	idx = mutate.Annotations(idx, Labels(o.Version, o.Commit)).(v1.ImageIndex)
	dir := filepath.Join(stage, "oci")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// The names docker load (io.containerd.image.name) and podman, skopeo and buildkit's
	// convention (org.opencontainers.image.ref.name, the tag) give the loaded image.
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          Repository + ":" + o.Version,
		"org.opencontainers.image.ref.name": o.Version,
	})); err != nil {
		return err
	}
	return tarDir(dir, path, o.Created)
}

// tarDir writes the regular files and directories under dir, in lexical order, as a tar at path.
func tarDir(dir, path string, mtime time.Time) error {
	var files []file
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			files = append(files, file{Name: rel + "/", Mode: 0o755})
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, file{Name: rel, Mode: 0o644, Body: b})
		return nil
	})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTar(f, files, mtime); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSums writes the SHA-256 of each file (by base name, sorted) to path as `sha256sum` does.
func writeSums(path string, files []string) error {
	var lines []string
	for _, f := range files {
		if f == "" {
			continue
		}
		sum, err := fileSHA256(f)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+filepath.Base(f)+"\n")
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
}

// fileSHA256 returns the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ParseCreated turns a SOURCE_DATE_EPOCH value (Unix seconds; empty for the epoch) into a time.
func ParseCreated(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("creation time %q: want Unix seconds (git log -1 --format=%%ct): %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}
