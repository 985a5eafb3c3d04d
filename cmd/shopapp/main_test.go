package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxd/outboxd/internal/shop"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseOptionsFromParts(t *testing.T) {
	o, err := parseOptions([]string{"-every", "250ms", "-addr", "mysql:3306"}, env(map[string]string{
		"SHOPAPP_MYSQL_PASSWORD": "p@ss/w:rd", // characters that would break a hand-built DSN
	}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(o.DSN)
	if err != nil {
		t.Fatalf("DSN %q: %v", o.DSN, err)
	}
	if cfg.Addr != "mysql:3306" || cfg.User != "shopapp" || cfg.Passwd != "p@ss/w:rd" || cfg.DBName != "shop" {
		t.Errorf("DSN parts = %s %s %q %s", cfg.Addr, cfg.User, cfg.Passwd, cfg.DBName)
	}
	if cfg.Collation != "utf8mb4_general_ci" {
		t.Errorf("collation %q, want utf8mb4_general_ci", cfg.Collation)
	}
	if o.Every != 250*time.Millisecond || o.PaidEach != 3 {
		t.Errorf("every %s paid-every %d", o.Every, o.PaidEach)
	}
	if p := o.plan(); p.Paid.Topic != "pay.succeeded" || p.Created.Topic != "order.created" {
		t.Errorf("plan %+v", p)
	}
}

func TestParseOptionsDSNAndErrors(t *testing.T) {
	o, err := parseOptions(nil, env(map[string]string{"SHOPAPP_DSN": "u:p@tcp(db:3307)/x", "SHOPAPP_EVERY": "2s"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := mysql.ParseDSN(o.DSN); cfg.Addr != "db:3307" || cfg.DBName != "x" || o.Every != 2*time.Second {
		t.Errorf("DSN %q every %s", o.DSN, o.Every)
	}
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad env duration": {nil, map[string]string{"SHOPAPP_EVERY": "soon"}, "SHOPAPP_EVERY"},
		"zero interval":    {[]string{"-every", "0s"}, nil, "-every must be positive"},
		"bad DSN":          {nil, map[string]string{"SHOPAPP_DSN": "no-slash"}, "SHOPAPP_DSN"},
		"unknown flag":     {[]string{"-nope"}, nil, "flags:"},
	} {
		if _, err := parseOptions(c.args, env(c.env)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestRunPlacesOrders(t *testing.T) {
	srv := mariadb.StartT(t, mariadb.Options{})
	db, err := srv.DB(t.Context(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range shop.SchemaStatements() {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-every", "5ms", "-max", "3"}, env(map[string]string{"SHOPAPP_DSN": srv.RootDSN("shop")}), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var created, paid int
	if err := db.QueryRowContext(t.Context(),
		"SELECT SUM(topic = 'order.created'), SUM(topic = 'pay.succeeded') FROM outbox_event").Scan(&created, &paid); err != nil {
		t.Fatal(err)
	}
	if created != 2 || paid != 1 {
		t.Errorf("outbox holds %d order.created and %d pay.succeeded, want 2 and 1\n%s", created, paid, out.String())
	}
	if !strings.Contains(out.String(), "3 orders committed") {
		t.Errorf("output lacks the summary:\n%s", out.String())
	}
}
