// Package testcert makes throwaway X.509 certificates for tests: a CA, a server certificate
// it signs for 127.0.0.1 and localhost, and client certificates, written as PEM files.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is a CA and a server certificate signed by it, as PEM files in Dir.
type Set struct {
	Dir string
	// CAFile, CertFile and KeyFile are the paths of the PEM files.
	CAFile, CertFile, KeyFile string
	// CAPEM is the CA certificate's PEM.
	CAPEM []byte
	// Server is the server's certificate and key, for a tls.Config.
	Server tls.Certificate

	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
}

// Client is a client certificate signed by a Set's CA.
type Client struct {
	// CertFile and KeyFile are the paths of the PEM files.
	CertFile, KeyFile string
	// KeyPEM is the private key's PEM (for a key given inline).
	KeyPEM []byte
	// Cert is the certificate and key, for a tls.Config.
	Cert tls.Certificate
}

// New writes a fresh CA (named cn) and a server certificate for 127.0.0.1, ::1 and localhost
// into dir. It blocks on key generation and file writes; on error no Set is returned.
func New(dir, cn string) (*Set, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	s := &Set{
		Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server-cert.pem"),
		KeyFile: filepath.Join(dir, "server-key.pem"),
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		caKey:   caKey, caCert: caCert,
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	for f, b := range map[string][]byte{s.CAFile: s.CAPEM, s.CertFile: certPEM, s.KeyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
	}
	if s.Server, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	return s, nil
}

// Client writes a client certificate for common name cn (used as the file names' stem too),
// signed by the CA, into the Set's Dir. It blocks on key generation and file writes.
func (s *Set) Client(cn string) (*Client, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, &key.PublicKey, s.caKey)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &Client{CertFile: filepath.Join(s.Dir, cn+"-cert.pem"), KeyFile: filepath.Join(s.Dir, cn+"-key.pem"),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(c.CertFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.KeyFile, c.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	if c.Cert, err = tls.X509KeyPair(certPEM, c.KeyPEM); err != nil {
		return nil, err
	}
	return c, nil
}

// RequireClientTLS returns a tls.Config serving the server certificate that demands a client
// certificate signed by the CA.
func (s *Set) RequireClientTLS() *tls.Config {
	c := s.ServerTLS()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.ClientCAs = s.Pool()
	return c
}

// ServerTLS returns a tls.Config serving the server certificate.
func (s *Set) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.Server}, MinVersion: tls.VersionTLS12}
}

// Pool returns a pool holding the CA.
func (s *Set) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(s.CAPEM)
	return p
}

// MutualT is what a test of client certificates needs: a CA named caName (server certificate
// included) with a client certificate for clientCN, and a stranger's client certificate from
// another CA, each in its own t.TempDir. It stops the test with t.Fatal on any error.
func MutualT(t testing.TB, caName, clientCN string) (ca *Set, client, stranger *Client) {
	t.Helper()
	ca, err := New(t.TempDir(), caName)
	if err != nil {
		t.Fatal(err)
	}
	if client, err = ca.Client(clientCN); err != nil {
		t.Fatal(err)
	}
	other, err := New(t.TempDir(), "other CA")
	if err != nil {
		t.Fatal(err)
	}
	if stranger, err = other.Client("stranger"); err != nil {
		t.Fatal(err)
	}
	return ca, client, stranger
}
