package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/outboxd/outboxd/config"
)

// cmdHealth probes /healthz, or /readyz with --ready, and returns nil only on 200. It blocks
// for at most --timeout.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("health", stdout, stderr)
	addrFlag := fs.String("addr", "", "the admin server `HOST:PORT` (0.0.0.0 and :: mean loopback; default: admin.listen from the config, else "+config.DefaultAdminListen+")")
	ready := fs.Bool("ready", false, "probe /readyz (source connected, sinks reachable) instead of /healthz (the process serves)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := fs.parse(args); err != nil {
		return err
	}
	addr, err := fs.adminAddr(*addrFlag)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--addr %q: want host:port: %w", addr, err)}
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	line, err := probeAdmin(ctx, host, port, path, *timeout)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintln(stdout, line)
	return nil
}

// probeAdmin GETs path from the admin server at host:port and returns a one-line summary on
// 200, an error naming the URL and the answer otherwise. A wildcard host (0.0.0.0, ::, "") is
// probed on loopback, so the same address as admin.listen works.
func probeAdmin(ctx context.Context, host, port, path string, timeout time.Duration) (string, error) {
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
