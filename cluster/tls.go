package cluster

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// ErrInsecure is the error of a config that would serve sessions in
// plaintext on an address other processes and machines can reach: a
// non-loopback Bind without TLS (set TLS, or Insecure to accept it).
var ErrInsecure = errors.New("cluster: plaintext on a non-loopback address")

// errNoCertificate refuses a connection that presented no certificate.
var errNoCertificate = errors.New("no certificate presented")

// LoadTLS builds the mutual TLS configuration of a member or a client
// from PEM files: this process's certificate chain and private key, and
// the certificate of the CA that signs every member's and client's
// certificate (the only CA trusted, both ways). Each certificate must
// carry the address it is reached at as a subject alternative name (its
// process's Bind, a client's included: the members connect back to it;
// an IP SAN for an IP address) and be usable for both server and client
// authentication.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: tls: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster: tls: %s: no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

// checkTLS reports a TLS configuration that cannot authenticate both
// ways: it needs a certificate of its own and a CA pool (without one,
// crypto/x509 would trust the system's CAs).
func checkTLS(c *tls.Config) error {
	if c == nil {
		return nil
	}
	var errs []error
	if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetClientCertificate == nil {
		errs = append(errs, errors.New("cluster: config: TLS has no certificate"))
	}
	if c.RootCAs == nil && c.ClientCAs == nil {
		errs = append(errs, errors.New("cluster: config: TLS has no CA (RootCAs or ClientCAs): the system's CAs are not trusted for peers"))
	}
	if c.InsecureSkipVerify {
		errs = append(errs, errors.New("cluster: config: TLS skips verification (InsecureSkipVerify)"))
	}
	return errors.Join(errs...)
}

// isLoopback says host is a loopback address (or localhost, or empty:
// the default, 127.0.0.1).
func isLoopback(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkBind enforces the plaintext rule: without TLS, only a loopback
// address, unless insecure.
func checkBind(bind string, c *tls.Config, insecure bool) error {
	if c == nil && !insecure && !isLoopback(bind) {
		return fmt.Errorf("%w: Bind %s: anyone who reaches it could create sessions and read every session's messages; give TLS settings, or set Insecure", ErrInsecure, bind)
	}
	return nil
}

// withCAs returns a copy of c whose RootCAs and ClientCAs are both set
// (one stands for the other when missing).
func withCAs(c *tls.Config) *tls.Config {
	c = c.Clone()
	if c.RootCAs == nil {
		c.RootCAs = c.ClientCAs
	}
	if c.ClientCAs == nil {
		c.ClientCAs = c.RootCAs
	}
	return c
}

// clientTLS is the configuration of this process's outgoing connections:
// its certificate, and the CA that must have signed the peer's.
func clientTLS(c *tls.Config) *tls.Config { return withCAs(c) }

// serverTLS is the configuration of this process's listeners: every
// connection must present a certificate the CA signed for client
// authentication, or it is refused, and the refusal reported through
// refused. crypto/tls checks the client's certificate itself with
// RequireAndVerifyClientCert but calls no hook when the check fails, so
// the check is made here (the same one: the chain up to ClientCAs, for
// client authentication, at the config's time), in VerifyConnection of a
// per-connection config that knows the connection's address. The
// handshake does not name the CA to the client (a Go client would
// otherwise send no certificate at all when its own is from another CA,
// and the refusal could not say which one it was). nextProtos are the
// application protocols the server offers (ALPN). A GetConfigForClient
// of c is replaced.
func serverTLS(c *tls.Config, refused *refusals, nextProtos ...string) *tls.Config {
	base := withCAs(c)
	cas := base.ClientCAs
	base.ClientCAs = nil
	base.ClientAuth = tls.RequestClientCert
	base.NextProtos = nextProtos
	base.GetConfigForClient = nil
	user := base.VerifyConnection
	srv := base.Clone()
	srv.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		conn := base.Clone()
		from := hello.Conn.RemoteAddr().String()
		conn.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := verifyClient(cas, conn.Time, cs.PeerCertificates); err != nil {
				return refused.report(from, cs.PeerCertificates, err)
			}
			if user != nil {
				return user(cs)
			}
			return nil
		}
		return conn, nil
	}
	return srv
}

// verifyClient checks a client's certificate chain against the CAs, as
// crypto/tls does for RequireAndVerifyClientCert; clock is the config's
// Time (nil: time.Now).
func verifyClient(cas *x509.CertPool, clock func() time.Time, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errNoCertificate
	}
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	now := time.Now()
	if clock != nil {
		now = clock()
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

// RefusedError is a connection refused for its certificate: a client or
// a member connecting to this one presented none, or one the CA did not
// sign; or a peer this one polled answered with one the CA did not sign
// for its address.
type RefusedError struct {
	Peer    string // the address the connection came from, or the peer polled
	Subject string // of the certificate presented ("" when none was)
	Issuer  string
	Err     error // why it was refused
}

func (e *RefusedError) Error() string {
	if e.Subject == "" {
		return fmt.Sprintf("cluster: refused %s: %v", e.Peer, e.Err)
	}
	return fmt.Sprintf("cluster: refused %s (certificate %q issued by %q): %v", e.Peer, e.Subject, e.Issuer, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// maxRefusals bounds the refusals remembered: past it, they are
// forgotten, and each is reported once more.
const maxRefusals = 1024

// refusals reports each refused certificate once (a peer retries every
// refresh, a client every attempt); nil reports nothing.
type refusals struct {
	report1 func(*RefusedError)

	mu   sync.Mutex
	seen map[string]bool
}

func newRefusals(f func(*RefusedError)) *refusals {
	if f == nil {
		return nil
	}
	return &refusals{report1: f, seen: map[string]bool{}}
}

// report makes the RefusedError of a refused connection, hands it to the
// callback the first time its certificate (or, without one, its host) is
// refused, and returns it.
func (r *refusals) report(peer string, chain []*x509.Certificate, err error) error {
	re := &RefusedError{Peer: peer, Err: err}
	key := "no certificate from " + peer
	if host, _, serr := net.SplitHostPort(peer); serr == nil {
		key = "no certificate from " + host
	}
	if len(chain) > 0 {
		re.Subject, re.Issuer = chain[0].Subject.String(), chain[0].Issuer.String()
		sum := sha256.Sum256(chain[0].Raw)
		key = string(sum[:])
	}
	if r == nil {
		return re
	}
	r.mu.Lock()
	if len(r.seen) >= maxRefusals {
		clear(r.seen)
	}
	first := !r.seen[key]
	r.seen[key] = true
	r.mu.Unlock()
	if first {
		r.report1(re)
	}
	return re
}

// pollRefused reports the failure of a poll of peer when it is the
// peer's certificate that failed verification, and returns err.
func (r *refusals) pollRefused(peer string, err error) error {
	var ve *tls.CertificateVerificationError
	if errors.As(err, &ve) {
		_ = r.report(peer, ve.UnverifiedCertificates, ve.Err)
	}
	return err
}
