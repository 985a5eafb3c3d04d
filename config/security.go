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
)

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

	// caPEM is CAFile's content, read at load so a bad file stops outboxd at start.
	caPEM []byte
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

	caPEM []byte
}

// SASL authenticates to Kafka brokers.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `yaml:"mechanism"`
	// Username is the SASL user name (required).
	Username string `yaml:"username"`
	// Password is the SASL password, usually ${VAR}; never written to logs. This or
	// PasswordFile is required.
	Password string `yaml:"password"`
	// PasswordFile names a file holding the password, read at load; exclusive with Password.
	PasswordFile string `yaml:"password_file"`
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
	secret("source.password", &c.Source.Password, c.Source.PasswordFile)
	if t := c.Source.TLS; t != nil {
		t.caPEM = ca("source.tls.ca_file", t.CAFile)
	}
	for _, name := range sortedKeys(c.Sinks) {
		s := c.Sinks[name]
		field := "sinks." + name
		secret(field+".access_key", &s.AccessKey, s.AccessKeyFile)
		secret(field+".secret_key", &s.SecretKey, s.SecretKeyFile)
		if s.SASL != nil {
			sasl := *s.SASL
			secret(field+".sasl.password", &sasl.Password, sasl.PasswordFile)
			s.SASL = &sasl
		}
		if s.TLS != nil {
			t := *s.TLS
			t.caPEM = ca(field+".tls.ca_file", t.CAFile)
			s.TLS = &t
		}
		c.Sinks[name] = s
	}
	return p.errs
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
	}
	for _, name := range sortedKeys(c.Sinks) {
		s := c.Sinks[name]
		field := "sinks." + name
		if s.SASL != nil {
			switch s.SASL.Mechanism {
			case SASLPlain, SASLScramSHA256, SASLScramSHA512:
			case "":
				p.add(field+".sasl.mechanism", "is required; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
			default:
				p.add(field+".sasl.mechanism", "%q is not allowed; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.SASL.Mechanism)
			}
			if s.SASL.Username == "" {
				p.add(field+".sasl.username", "is required")
			}
			if s.SASL.Password == "" {
				p.add(field+".sasl.password", "is required; set password (from ${VAR}) or password_file")
			}
		}
		if s.TLS != nil && s.TLS.InsecureSkipVerify && s.TLS.CAFile != "" {
			p.add(field+".tls.insecure_skip_verify", "makes ca_file useless; remove one of them")
		}
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
	return cfg, nil
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
