package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// source.tls.mode values, as in MySQL's --ssl-mode.
const (
	// TLSDisabled connects in plain text. It is the default: outboxd makes the operator choose
	// encryption explicitly rather than defaulting to preferred, whose silent fallback to plain
	// text and missing certificate check give a false sense of protection.
	TLSDisabled = "disabled"
	// TLSPreferred uses TLS when the server offers it, without verifying its certificate, and
	// plain text otherwise. It protects only against passive eavesdropping.
	TLSPreferred = "preferred"
	// TLSRequired insists on TLS but does not verify the server's certificate (unless ca_file is
	// set, which then verifies the chain but not the name).
	TLSRequired = "required"
	// TLSVerifyIdentity insists on TLS and verifies the certificate chain against ca_file (or
	// the system roots) and the host name against server_name (or the host of source.addr).
	TLSVerifyIdentity = "verify-identity"
)

// sinks.<name>.sasl.mechanism values.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	// SASLOAuthBearer sends a bearer token (RFC 7628) read from sasl.token_file.
	SASLOAuthBearer = "OAUTHBEARER"
	// SASLAWSMSKIAM signs each connection with AWS credentials from the standard chain
	// (environment, shared profile, web identity, container or instance role), as MSK's IAM
	// access control wants.
	SASLAWSMSKIAM = "AWS_MSK_IAM"
)

// saslMechanisms lists the allowed mechanisms, for messages.
const saslMechanisms = "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"

// SourceTLS configures TLS for both connections to the source: the SQL one and the binlog dump.
type SourceTLS struct {
	// Mode is TLSDisabled (the default), TLSPreferred, TLSRequired or TLSVerifyIdentity:
	// disabled connects in plain text; preferred uses TLS when the server offers it, without
	// verifying its certificate; required insists on TLS and verifies the chain only when
	// ca_file is set; verify-identity verifies the chain (ca_file or the system roots) and
	// the name (server_name or the host of source.addr).
	Mode string `yaml:"mode"`
	// CAFile is a PEM file of CA certificates that sign the server's certificate; read at load.
	CAFile string `yaml:"ca_file"`
	// ServerName is the name expected in the server's certificate; default the host of addr.
	ServerName string `yaml:"server_name"`
	// CertFile is a PEM file of the client certificate presented to the server, on the SQL
	// and the binlog connections alike, for users created with REQUIRE X509 or REQUIRE
	// SUBJECT; read at load. It needs KeyFile or Key, and mode required or verify-identity.
	CertFile string `yaml:"cert_file"`
	// KeyFile is a PEM file of CertFile's private key, read at load; exclusive with Key.
	KeyFile string `yaml:"key_file"`
	// Key is CertFile's private key as PEM, usually ${VAR}; never written to logs. Exclusive
	// with KeyFile.
	Key string `yaml:"key"`

	// caPEM is CAFile's content, read at load so a bad file stops outboxd at start.
	caPEM []byte
	// cert is the client certificate and key, parsed at load; nil without cert_file.
	cert *tls.Certificate
}

// SinkTLS configures TLS to Kafka brokers. The brokers' certificates are always verified unless
// InsecureSkipVerify is set.
type SinkTLS struct {
	// CAFile is a PEM file of CA certificates; default the system roots. Read at load.
	CAFile string `yaml:"ca_file"`
	// ServerName overrides the name checked in each broker's certificate; default each
	// broker's host.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify disables certificate verification: for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// CertFile is a PEM file of the client certificate presented to the brokers, for clusters
	// that authenticate clients by certificate (ssl.client.auth=required); read at load. It
	// needs KeyFile or Key.
	CertFile string `yaml:"cert_file"`
	// KeyFile is a PEM file of CertFile's private key, read at load; exclusive with Key.
	KeyFile string `yaml:"key_file"`
	// Key is CertFile's private key as PEM, usually ${VAR}; never written to logs. Exclusive
	// with KeyFile.
	Key string `yaml:"key"`

	caPEM []byte
	cert  *tls.Certificate
}

// SASL authenticates to Kafka brokers.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM.
	Mechanism string `yaml:"mechanism"`
	// Username is the SASL user name (PLAIN and SCRAM, required there).
	Username string `yaml:"username"`
	// Password is the SASL password, usually ${VAR}; never written to logs. This or
	// PasswordFile is required with PLAIN and SCRAM.
	Password string `yaml:"password"`
	// PasswordFile names a file holding the password, read at load; exclusive with Password.
	PasswordFile string `yaml:"password_file"`
	// TokenFile names a file holding the OAUTHBEARER token (OAUTHBEARER only, required
	// there); never written to logs. It is read at load to check it, then again for every
	// new broker connection, so a token that an agent rewrites in place is picked up
	// without a restart.
	TokenFile string `yaml:"token_file"`
	// Region is the AWS region of the MSK cluster (AWS_MSK_IAM only); default the region of
	// the standard AWS configuration (AWS_REGION, the shared profile).
	Region string `yaml:"region"`
}

// maxSecretFile bounds what is read from a *_file or ca_file: a mistaken path such as
// /dev/zero must fail, not fill memory.
const maxSecretFile = 1 << 20

func readLimitedFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxSecretFile)
	}
	return b, nil
}

// resolveFiles reads every *_file secret into its value field and every ca_file into memory,
// returning one FieldError per problem. A secret given both ways is an error: which one wins
// would otherwise be a guess.
func (c *Config) resolveFiles(readFile func(string) ([]byte, error), skipCA bool) []error {
	p := &problems{c: c}
	secret := func(field string, val *string, file string) {
		if file == "" {
			return
		}
		if *val != "" {
			p.add(field+"_file", "set either %s or %s_file, not both", lastPart(field), lastPart(field))
			return
		}
		b, err := readFile(file)
		if err != nil {
			// The error names the path only; the content is never in it.
			p.add(field+"_file", "cannot read the secret: %v", err)
			return
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			p.add(field+"_file", "%s is empty", file)
			return
		}
		*val = v
	}
	ca := func(field, file string) []byte {
		if file == "" || skipCA {
			return nil
		}
		b, err := readFile(file)
		if err != nil {
			p.add(field, "cannot read the CA file: %v", err)
			return nil
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			p.add(field, "%s holds no PEM certificate", file)
			return nil
		}
		return b
	}
	// pair parses a client certificate with its key; the presence of both was checked by
	// validateClientCert, so a missing one is left to its message.
	pair := func(field string, cc clientCert) *tls.Certificate {
		if skipCA || cc.certFile == "" || (cc.keyFile == "") == (cc.key == "") {
			return nil
		}
		certPEM, err := readFile(cc.certFile)
		if err != nil {
			p.add(field+".cert_file", "cannot read the certificate: %v", err)
			return nil
		}
		keyPEM, keyField := []byte(cc.key), field+".key"
		if cc.keyFile != "" {
			keyField = field + ".key_file"
			if keyPEM, err = readFile(cc.keyFile); err != nil {
				// The error names the path only; the key is never in it.
				p.add(keyField, "cannot read the key: %v", err)
				return nil
			}
		}
		if !x509.NewCertPool().AppendCertsFromPEM(certPEM) {
			p.add(field+".cert_file", "%s holds no PEM certificate", cc.certFile)
			return nil
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// crypto/tls's messages ("private key does not match public key", "failed to find
			// any PEM data in key input") never quote the key.
			p.add(keyField, "is not the private key of %s (%v); give the PEM key that belongs to that certificate", cc.certFile, err)
			return nil
		}
		return &cert
	}
	secret("source.password", &c.Source.Password, c.Source.PasswordFile)
	if t := c.Source.TLS; t != nil {
		t.caPEM = ca("source.tls.ca_file", t.CAFile)
		t.cert = pair("source.tls", t.clientCert())
	}
	for _, name := range sortedKeys(c.Sinks) {
		s := c.Sinks[name]
		field := "sinks." + name
		secret(field+".access_key", &s.AccessKey, s.AccessKeyFile)
		secret(field+".secret_key", &s.SecretKey, s.SecretKeyFile)
		if s.SASL != nil {
			sasl := *s.SASL
			secret(field+".sasl.password", &sasl.Password, sasl.PasswordFile)
			if sasl.TokenFile != "" && !skipCA {
				// Read now only to fail at start; the sink reads it again per connection.
				if b, err := readFile(sasl.TokenFile); err != nil {
					p.add(field+".sasl.token_file", "cannot read the token: %v", err)
				} else if strings.TrimSpace(string(b)) == "" {
					p.add(field+".sasl.token_file", "%s is empty", sasl.TokenFile)
				}
			}
			s.SASL = &sasl
		}
		if s.TLS != nil {
			t := *s.TLS
			t.caPEM = ca(field+".tls.ca_file", t.CAFile)
			t.cert = pair(field+".tls", t.clientCert())
			s.TLS = &t
		}
		c.Sinks[name] = s
	}
	return p.errs
}

// clientCert is the client certificate settings shared by SourceTLS and SinkTLS.
type clientCert struct{ certFile, keyFile, key string }

func (t *SourceTLS) clientCert() clientCert { return clientCert{t.CertFile, t.KeyFile, t.Key} }
func (t *SinkTLS) clientCert() clientCert   { return clientCert{t.CertFile, t.KeyFile, t.Key} }

// validateClientCert checks that a client certificate comes with exactly one key and a key
// with a certificate: either half alone would be ignored by the handshake or fail it.
func validateClientCert(p *problems, field string, cc clientCert) {
	switch {
	case cc.keyFile != "" && cc.key != "":
		p.add(field+".key_file", "set either key or key_file, not both")
	case cc.certFile != "" && cc.keyFile == "" && cc.key == "":
		p.add(field+".cert_file", "needs its private key; set key_file (or key, from ${VAR}) too")
	case cc.certFile == "" && cc.keyFile != "":
		p.add(field+".key_file", "needs its certificate; set cert_file to the client certificate of this key, or remove key_file")
	case cc.certFile == "" && cc.key != "":
		p.add(field+".key", "needs its certificate; set cert_file to the client certificate of this key, or remove key")
	}
}

func lastPart(field string) string {
	return field[strings.LastIndexByte(field, '.')+1:]
}

func (c *Config) validateSecurity(p *problems) {
	if t := c.Source.TLS; t != nil {
		switch t.Mode {
		case TLSDisabled, TLSPreferred, TLSRequired, TLSVerifyIdentity:
		default:
			p.add("source.tls.mode", "%q is not allowed; use disabled, preferred, required or verify-identity", t.Mode)
		}
		if t.Mode == TLSDisabled || t.Mode == TLSPreferred {
			if t.CAFile != "" {
				p.add("source.tls.ca_file", "is not used with mode %s; use required or verify-identity", t.Mode)
			}
			if t.ServerName != "" {
				p.add("source.tls.server_name", "is not used with mode %s; use verify-identity", t.Mode)
			}
		}
		if t.Mode == TLSDisabled && t.CertFile != "" {
			p.add("source.tls.cert_file", "is not used with mode disabled; use required or verify-identity")
		}
		validateClientCert(p, "source.tls", t.clientCert())
	}
	for _, name := range sortedKeys(c.Sinks) {
		s := c.Sinks[name]
		field := "sinks." + name
		if s.SASL != nil {
			validateSASL(p, field+".sasl", s.SASL)
		}
		if s.TLS != nil {
			if s.TLS.InsecureSkipVerify && s.TLS.CAFile != "" {
				p.add(field+".tls.insecure_skip_verify", "makes ca_file useless; remove one of them")
			}
			validateClientCert(p, field+".tls", s.TLS.clientCert())
		}
	}
}

// validateSASL names every key that is missing for a's mechanism or that it would ignore.
func validateSASL(p *problems, field string, a *SASL) {
	m := a.Mechanism
	// unused names the keys set that mechanism m does not read: a setting silently ignored
	// is a mistake worth stopping for.
	unused := func(keys map[string]bool) {
		for _, k := range sortedKeys(keys) {
			if keys[k] {
				p.add(field+"."+k, "is not used with mechanism %s; remove it", m)
			}
		}
	}
	switch m {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if a.Username == "" {
			p.add(field+".username", "is required")
		}
		if a.Password == "" {
			p.add(field+".password", "is required; set password (from ${VAR}) or password_file")
		}
		unused(map[string]bool{"token_file": a.TokenFile != "", "region": a.Region != ""})
	case SASLOAuthBearer:
		if a.TokenFile == "" {
			p.add(field+".token_file", "is required with OAUTHBEARER; name the file your token agent keeps current")
		}
		unused(map[string]bool{"username": a.Username != "", "password": a.Password != "" && a.PasswordFile == "",
			"password_file": a.PasswordFile != "", "region": a.Region != ""})
	case SASLAWSMSKIAM:
		unused(map[string]bool{"username": a.Username != "", "password": a.Password != "" && a.PasswordFile == "",
			"password_file": a.PasswordFile != "", "token_file": a.TokenFile != ""})
	case "":
		p.add(field+".mechanism", "is required; use %s", saslMechanisms)
	default:
		p.add(field+".mechanism", "%q is not allowed; use %s", m, saslMechanisms)
	}
}

// Enabled reports whether the source connections should attempt TLS. Pure.
func (t *SourceTLS) Enabled() bool {
	return t != nil && t.Mode != "" && t.Mode != TLSDisabled
}

// ClientConfig returns the TLS configuration for connecting to the source at host (the host
// part of source.addr), or nil when TLS is disabled. With mode preferred the caller must allow
// a fallback to plain text. It does no I/O (the CA file was read at load); on error the result
// is nil.
func (t *SourceTLS) ClientConfig(host string) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var roots *x509.CertPool
	if pem, err := caBytes(t.caPEM, t.CAFile); err != nil {
		return nil, fmt.Errorf("source.tls.ca_file: %w", err)
	} else if pem != nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
	}
	cert, err := clientCertificate(t.cert, t.clientCert())
	if err != nil {
		return nil, fmt.Errorf("source.tls: %w", err)
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	switch t.Mode {
	case TLSPreferred:
		cfg.InsecureSkipVerify = true
	case TLSRequired:
		// Like MySQL's REQUIRED with --ssl-ca: verify the chain when a CA is given, never the
		// name. crypto/tls has no such mode, so verify by hand.
		cfg.InsecureSkipVerify = true
		if roots != nil {
			cfg.VerifyPeerCertificate = verifyChainOnly(roots)
		}
	case TLSVerifyIdentity:
		cfg.RootCAs = roots
		cfg.ServerName = t.ServerName
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
	default:
		return nil, fmt.Errorf("source.tls.mode %q is not allowed", t.Mode)
	}
	return cfg, nil
}

func verifyChainOnly(roots *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the server sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
			return fmt.Errorf("server certificate is not signed by source.tls.ca_file: %w", err)
		}
		return nil
	}
}

// ClientConfig returns the TLS configuration for the brokers, or nil when t is nil. It does no
// I/O for a Config from Parse or Load (the CA file was read then); one built in code has its
// CA file read now. On error the result is nil.
func (t *SinkTLS) ClientConfig() (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	pem, err := caBytes(t.caPEM, t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tls.ca_file: %w", err)
	}
	if pem != nil {
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	cert, err := clientCertificate(t.cert, t.clientCert())
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg, nil
}

// clientCertificate returns the pair parsed at load, or reads and parses it for a Config built
// in code; nil without cert_file.
func clientCertificate(loaded *tls.Certificate, cc clientCert) (*tls.Certificate, error) {
	if loaded != nil || cc.certFile == "" {
		return loaded, nil
	}
	if cc.keyFile != "" && cc.key != "" {
		return nil, errors.New("set either key or key_file, not both")
	}
	certPEM, err := readLimitedFile(cc.certFile)
	if err != nil {
		return nil, fmt.Errorf("cert_file: %w", err)
	}
	keyPEM := []byte(cc.key)
	if cc.keyFile != "" {
		if keyPEM, err = readLimitedFile(cc.keyFile); err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cert_file %s and its key: %w", cc.certFile, err)
	}
	return &cert, nil
}

// caBytes returns the CA PEM read at load, or reads file for a Config built in code.
func caBytes(loaded []byte, file string) ([]byte, error) {
	if loaded != nil || file == "" {
		return loaded, nil
	}
	b, err := readLimitedFile(file)
	if err != nil {
		return nil, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return b, nil
}
