package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
)

const healthUsage = `Usage: outboxd health [--addr HOST:PORT] [--ready] [--timeout D]

Probes a running outboxd's admin server (admin.listen) and exits 0 when it answers 200, 1
otherwise (not listening, timeout, any other status). For container healthchecks: the image is
distroless, with no shell or curl.

  --addr HOST:PORT  the admin server (default ` + config.DefaultAdminListen + `; 0.0.0.0 and :: mean loopback)
  --ready           probe /readyz (source connected, sinks reachable) instead of /healthz (the
                    process serves)
  --timeout D       give up after D (default 3s)
`

// cmdHealth probes /healthz, or /readyz with --ready, and returns nil only on 200. It blocks
// for at most --timeout.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // usage is printed below, to stdout for --help
	addr := fs.String("addr", config.DefaultAdminListen, "")
	ready := fs.Bool("ready", false, "")
	timeout := fs.Duration("timeout", 3*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, healthUsage)
			return nil
		}
		fmt.Fprint(stderr, healthUsage)
		return &exitError{code: 2, err: err}
	}
	if fs.NArg() > 0 {
		fmt.Fprint(stderr, healthUsage)
		return &exitError{code: 2, err: fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--addr %q: want host:port: %w", *addr, err)}
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	line, err := probeAdmin(ctx, *addr, path, *timeout)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintln(stdout, line)
	return nil
}

// probeAdmin GETs path from the admin server at addr and returns a one-line summary on 200, an
// error naming the URL and the answer otherwise. A wildcard host (0.0.0.0, ::, "") is probed on
// loopback, so the same address as admin.listen works.
func probeAdmin(ctx context.Context, addr, path string, timeout time.Duration) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q: want host:port: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + path
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s: %w (is outboxd running with admin.listen on this address?)", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	summary := strings.Join(strings.Fields(string(body)), " ")
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, summary)
	}
	return fmt.Sprintf("%s: %s %s", url, resp.Status, summary), nil
}
