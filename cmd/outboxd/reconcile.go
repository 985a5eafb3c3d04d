package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/outboxd/outboxd/reconcile"
	"github.com/outboxd/outboxd/server"
)

func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("reconcile", stdout, stderr)
	since := fs.String("since", "", "start of the created_at window, inclusive: RFC 3339, now, or a duration from now such as -2h (required)")
	until := fs.String("until", "", "end of the window, exclusive, in the same forms (required)")
	slack := fs.Duration("slack", reconcile.DefaultSlack, "how far before and after the window the brokers are read (commit and store times follow created_at)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object instead of the summary")
	outFile := fs.String("out", "", "also write the JSON report to this file")
	cfg, err := fs.load(args)
	if err != nil {
		return err
	}
	now := timeNow()
	var w reconcile.Window
	if w.Since, err = reconcile.ParseTime(*since, now); err != nil && *since != "" {
		return &exitError{code: 2, err: fmt.Errorf("--since: %w", err)}
	}
	if w.Until, err = reconcile.ParseTime(*until, now); err != nil && *until != "" {
		return &exitError{code: 2, err: fmt.Errorf("--until: %w", err)}
	}
	if err := w.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	readers, err := reconcile.OpenReaders(cfg)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	db, err := server.Open(ctx, server.SourceConn(cfg))
	if err != nil {
		return fmt.Errorf("source %s: %w", cfg.Source.Addr, err)
	}
	defer db.Close()
	if tables, err := reconcile.UnindexedCreatedAt(ctx, db, cfg); err == nil {
		for _, t := range tables {
			fmt.Fprintf(stderr, "note: %s.%s leads no index: each slice of the window scans the table (ALTER TABLE %s ADD INDEX (%s))\n",
				t.Table, t.Columns.CreatedAt, t.Table, t.Columns.CreatedAt)
		}
	}
	rep, err := reconcile.Run(ctx, db, cfg, reconcile.Options{Window: w, Before: *slack, After: *slack, Readers: readers})
	var ce *reconcile.ConfigError
	if errors.As(err, &ce) {
		return &exitError{code: 2, err: err}
	}
	if err != nil {
		return err
	}
	if *outFile != "" {
		if err := writeJSONFile(*outFile, rep); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReconcile(stdout, rep)
	}
	if !rep.OK() {
		return &exitError{code: 1, err: errors.New(strings.Join(rep.Problems(), "; "))}
	}
	return nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printReconcile writes the summary and the lists for a person.
func printReconcile(w io.Writer, r reconcile.Report) {
	fmt.Fprintf(w, "window %s .. %s (brokers read %s .. %s)\n", r.Since.Format("2006-01-02T15:04:05.999999Z07:00"), r.Until.Format("2006-01-02T15:04:05.999999Z07:00"),
		r.From.Format("2006-01-02T15:04:05Z07:00"), r.To.Format("2006-01-02T15:04:05Z07:00"))
	fmt.Fprintf(w, "checked %d  found %d  dead_lettered %d  missing %d  duplicated %d\n", r.Checked, r.Found, r.DeadLettered, r.Missing, r.Duplicated)
	if r.Unchecked > 0 || r.NullCreatedAt > 0 {
		fmt.Fprintf(w, "UNCHECKED  %d of %d row(s) in the window (committed into it while it was read)  null_created_at %d (in no window)\n", r.Unchecked, r.InWindow, r.NullCreatedAt)
	}
	for _, e := range r.MissingEvents {
		fmt.Fprintf(w, "MISSING    %s  %s  created %s  -> %s/%s", e.EventID, e.Table, e.CreatedAt.Format("2006-01-02T15:04:05.999999Z07:00"), e.Sink, e.Topic)
		if e.Reason != "" {
			fmt.Fprintf(w, "  (%s)", e.Reason)
		}
		fmt.Fprintln(w)
	}
	for _, e := range r.DuplicatedEvents {
		fmt.Fprintf(w, "DUPLICATED %s  %s  %d copies for %d row(s)  at %s/%s\n", e.EventID, e.Table, e.Found, e.Rows, e.Sink, e.Topic)
	}
	if r.Truncated {
		fmt.Fprintf(w, "(lists stop at the first %d entries by created_at; the counts above are complete: narrow the window to list the rest)\n", reconcile.DefaultMaxListed)
	}
}
