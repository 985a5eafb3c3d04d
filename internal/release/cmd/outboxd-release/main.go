// Command outboxd-release builds a release into a directory: `make release` runs it with the
// version, commit and commit time from git. See package release for what it writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxd/outboxd/internal/release"
)

func main() {
	version := flag.String("version", "", "the version to stamp, name the files and tag the image with (e.g. v1.2.0)")
	commit := flag.String("commit", "", "the commit the release is built from (git rev-parse HEAD)")
	created := flag.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "Unix seconds given to every file and the image (default $SOURCE_DATE_EPOCH, else 0)")
	out := flag.String("out", "dist", "the directory to write the archives, the image tarball and SHA256SUMS to")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "outboxd-release takes no arguments, got %q\n", flag.Args())
		os.Exit(2)
	}
	t, err := release.ParseCreated(*created)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-release:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := release.Build(ctx, release.Options{
		Version: *version, Commit: *commit, Created: t, Source: ".", Out: *out, Log: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxd-release:", err)
		os.Exit(1)
	}
	for _, f := range append(res.Archives, res.Image, res.Sums) {
		fmt.Println(f)
	}
}
