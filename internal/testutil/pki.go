package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// A test PKI, made at test time with crypto/x509: ECDSA P-256 keys,
// certificates valid for an hour, for 127.0.0.1.

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func template(name string) *x509.Certificate {
	return &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
}

// NewCA makes a CA whose common name is name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key}
}

// Issue makes a certificate of common name name for 127.0.0.1 (an IP
// SAN), for server and client authentication, signed by ca, or by itself
// when ca is nil.
func Issue(t testing.TB, ca *CA, name string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca.Cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TLSConfig is a mutual TLS configuration for name: a certificate issued
// by issuer (self-signed when nil), trusting trust only.
func TLSConfig(t testing.TB, issuer, trust *CA, name string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(trust.Cert)
	return &tls.Config{Certificates: []tls.Certificate{Issue(t, issuer, name)}, RootCAs: pool, ClientCAs: pool,
		MinVersion: tls.VersionTLS13}
}

// WritePEM writes cert (its chain and key) and trust's certificate as PEM
// files in dir, named after name, and returns their paths.
func WritePEM(t testing.TB, dir, name string, cert tls.Certificate, trust *CA) (certFile, keyFile, caFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, ders ...[]byte) string {
		var b []byte
		for _, der := range ders {
			b = append(b, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})...)
		}
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write(name+".crt", "CERTIFICATE", cert.Certificate...), write(name+".key", "PRIVATE KEY", keyDER),
		write(name+"-ca.crt", "CERTIFICATE", trust.Cert.Raw)
}
