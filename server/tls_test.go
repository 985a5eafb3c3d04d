package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outboxd/outboxd/config"
	"github.com/outboxd/outboxd/gtid"
	"github.com/outboxd/outboxd/internal/testcert"
	"github.com/outboxd/outboxd/server"
	"github.com/outboxd/outboxd/testenv/mariadb"
)

// TestSourceTLSModes runs every source.tls mode against a MariaDB that serves a certificate the
// test made and a user that REQUIREs SSL, over both the SQL driver and go-mysql's client (what
// the binlog dump connection uses).
func TestSourceTLSModes(t *testing.T) {
	mariadb.RequireT(t)
	certs, err := testcert.New(t.TempDir(), "outboxd source CA")
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := testcert.New(t.TempDir(), "wrong CA")
	if err != nil {
		t.Fatal(err)
	}
	srv := mariadb.StartT(t, mariadb.Options{ExtraArgs: []string{
		"--ssl-ca=" + certs.CAFile, "--ssl-cert=" + certs.CertFile, "--ssl-key=" + certs.KeyFile}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root, err := srv.DB(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE USER 'tlsuser'@'%' IDENTIFIED BY 'tls-pw' REQUIRE SSL",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'tlsuser'@'%'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	conn := func(mode, ca string) (server.Conn, error) {
		st := &config.SourceTLS{Mode: mode, CAFile: ca}
		tc, err := st.ClientConfig("127.0.0.1")
		return server.Conn{Flavor: gtid.MariaDB, Addr: srv.Addr, User: "tlsuser", Password: "tls-pw",
			TLS: tc, TLSFallback: mode == config.TLSPreferred}, err
	}
	dump := func(c server.Conn) error {
		// The binlog syncer connects with client.Connect and SetTLSConfig, as here.
		cc, err := client.ConnectWithContext(ctx, c.Addr, c.User, c.Password, "", 10*time.Second, func(cc *client.Conn) error {
			if c.TLS != nil {
				cc.SetTLSConfig(c.TLS)
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer cc.Close()
		r, err := cc.Execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
		if err != nil {
			return err
		}
		if v, _ := r.GetString(0, 1); v == "" {
			t.Errorf("binlog-style connection is not encrypted")
		}
		return nil
	}

	for _, tc := range []struct {
		mode, ca string
		want     string // "" = works; else a substring of the error
	}{
		{config.TLSRequired, "", ""},
		{config.TLSRequired, certs.CAFile, ""},
		{config.TLSPreferred, "", ""},
		{config.TLSVerifyIdentity, certs.CAFile, ""},
		{config.TLSVerifyIdentity, wrong.CAFile, "certificate signed by unknown authority"},
		{config.TLSRequired, wrong.CAFile, "not signed by source.tls.ca_file"},
		{config.TLSDisabled, "", "Access denied"},
	} {
		t.Run(tc.mode+"/"+map[string]string{"": "no-ca", certs.CAFile: "ca", wrong.CAFile: "wrong-ca"}[tc.ca], func(t *testing.T) {
			c, err := conn(tc.mode, tc.ca)
			if err != nil {
				t.Fatal(err)
			}
			db, err := server.Open(ctx, c)
			if tc.want != "" {
				if err == nil {
					db.Close()
					t.Fatalf("SQL connection with mode %s succeeded, want %q", tc.mode, tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), srv.Addr) {
					t.Fatalf("SQL error = %v, want it to name %s and contain %q", err, srv.Addr, tc.want)
				}
				if derr := dump(c); derr == nil || !strings.Contains(derr.Error(), tc.want) {
					t.Fatalf("binlog connection error = %v, want %q", derr, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("SQL connection: %v", err)
			}
			defer db.Close()
			on, err := server.UsesTLS(ctx, db)
			if err != nil || !on {
				t.Fatalf("UsesTLS = %v, %v; want true", on, err)
			}
			if err := dump(c); err != nil {
				t.Fatalf("binlog connection: %v", err)
			}
		})
	}
}

// TestSourceClientCertificate runs against a MariaDB whose user is created REQUIRE X509: with
// source.tls.cert_file and key_file loaded by the config package, the SQL connection and the
// binlog-style connection both succeed; without them, or with a certificate of another CA, the
// server refuses both.
func TestSourceClientCertificate(t *testing.T) {
	mariadb.RequireT(t)
	certs, mine, stranger := testcert.MutualT(t, "outboxd source CA", "outboxd")
	srv := mariadb.StartT(t, mariadb.Options{ExtraArgs: []string{
		"--ssl-ca=" + certs.CAFile, "--ssl-cert=" + certs.CertFile, "--ssl-key=" + certs.KeyFile}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root, err := srv.DB(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE USER 'x509user'@'%' IDENTIFIED BY 'x509-pw' REQUIRE X509",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'x509user'@'%'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	connect := func(t *testing.T, cert, key string) (err error) {
		y := fmt.Sprintf(`
source: {flavor: mariadb, addr: %q, user: x509user, password: x509-pw, server_id: 4242,
  tls: {mode: verify-identity, ca_file: %q, server_name: localhost, cert_file: %q, key_file: %q}}
tables: [{table: shop.outbox_event}]
sinks: {main: {type: kafka, brokers: ["127.0.0.1:9092"]}}
routes: [{sink: main}]
`, srv.Addr, certs.CAFile, cert, key)
		if cert == "" {
			y = strings.Replace(y, `, cert_file: "", key_file: ""`, "", 1)
		}
		path := filepath.Join(t.TempDir(), "outboxd.yaml")
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		c := server.SourceConn(cfg)
		db, err := server.Open(ctx, c)
		if err == nil {
			db.Close()
		}
		cc, derr := client.ConnectWithContext(ctx, c.Addr, c.User, c.Password, "", 10*time.Second, func(cc *client.Conn) error {
			cc.SetTLSConfig(c.TLS) // as the binlog syncer does with BinlogTLS
			return nil
		})
		if derr == nil {
			cc.Close()
		}
		if (err == nil) != (derr == nil) {
			t.Fatalf("SQL connection: %v; binlog connection: %v; want both to agree", err, derr)
		}
		return err
	}
	if err := connect(t, mine.CertFile, mine.KeyFile); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	if err := connect(t, "", ""); err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("without a certificate: %v; want Access denied", err)
	}
	// The server ends the handshake itself when the certificate is not signed by its CA.
	if err := connect(t, stranger.CertFile, stranger.KeyFile); err == nil {
		t.Fatal("another CA's certificate was accepted")
	}
}
