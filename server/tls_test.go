package server_test

import (
	"context"
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
