package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// TestServeUsage: bad flags are bad usage, with one line.
func TestServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--addr", "0.0.0.0:0"},
		{"serve", "--addr", "nonsense"},
		{"serve", "--https-cert", "c.pem"},
		{"serve", "--max-body", "0"},
		{"serve", "extra"},
	} {
		t.Setenv("DSH_TOKEN", "")
		code, _, errOut := runDsh(append(args[:1:1], append([]string{"--dir", t.TempDir()}, args[1:]...)...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Equal(t, 2, strings.Count(errOut, "\n"), errOut)
	}
	t.Setenv("DSH_TOKEN", "")
	for _, args := range [][]string{
		{"serve", "--peers", "127.0.0.1:1"},
		{"serve", "--dir", t.TempDir(), "--tls-cert", "c.pem"},
	} {
		code, _, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	code, out, _ := runDsh("serve", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "--token-file")
}

// TestServeInProcess: dsh serve answers the API with the token from
// --token-file, and stops when its context ends (exit 0).
func TestServeInProcess(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte("tok\n"), 0o600))
	url, stop := serveInProcess(t, serveEnv{}, "--addr", "127.0.0.1:0", "--dir", dir, "--token-file", tokFile)
	req, err := http.NewRequest("POST", url+"/v1/sessions", strings.NewReader(`{"id":"s"}`))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	req.Header.Set("Authorization", "Bearer tok")
	req.Body = http.NoBody
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var c struct{ ID string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&c))
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	stop()
	http.DefaultClient.CloseIdleConnections()
}

// TestServeDrainsOnSIGTERM runs the real binary: at SIGTERM a turn that
// is running ends within --drain (completed), or is cancelled (aborted,
// cause disposed) when --drain is over first; the event stream ends
// cleanly, the log is valid and closed, and dsh exits 0.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	bin := buildDsh(t)
	for _, c := range []struct {
		drain string
		want  session.TurnEndReason
	}{
		{"30s", session.TurnEndReason{Kind: session.EndCompleted}},
		{"1ms", session.TurnEndReason{Kind: session.EndAborted, Cause: session.CancelCause{Kind: session.CauseDisposed}}},
	} {
		t.Run("drain="+c.drain, func(t *testing.T) {
			dir := t.TempDir()
			speed := "40" // about a second per answer
			if c.drain == "1ms" {
				speed = "2"
			}
			srv := startServe(t, bin, "--addr", "127.0.0.1:0", "--dir", dir, "--synthetic-speed", speed, "--drain", c.drain)
			url := srv.url
			post := func(path, body string) {
				res, err := http.Post(url+path, "application/json", strings.NewReader(body))
				require.NoError(t, err)
				res.Body.Close()
				require.Less(t, res.StatusCode, 300, path)
			}
			post("/v1/sessions", `{"id":"s"}`)
			res, err := http.Get(url + "/v1/sessions/s/events")
			require.NoError(t, err)
			defer res.Body.Close()
			post("/v1/sessions/s/messages", `{"text":"a story"}`)
			// Read the stream until the model is answering.
			r := bufio.NewReader(res.Body)
			for {
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				if strings.HasPrefix(line, "event: assistant/chunk") {
					break
				}
			}
			require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
			// The stream ends cleanly (EOF at an event boundary).
			rest, err := io.ReadAll(r)
			require.NoError(t, err)
			require.True(t, len(rest) == 0 || strings.HasSuffix(string(rest), "\n\n"), "%q", rest)
			srv.wait(t)

			f, err := session.ReadFile(findLog(t, dir))
			require.NoError(t, err)
			require.Nil(t, f.Torn)
			require.NoError(t, session.CheckTrace(f.Events))
			_, _, open := mustLog(t, f).OpenTurn()
			require.False(t, open)
			var ends []session.TurnEndReason
			for _, e := range f.Events {
				if p, ok := e.Payload().(session.TurnEnd); ok {
					ends = append(ends, p.Reason)
				}
			}
			require.Equal(t, []session.TurnEndReason{c.want}, ends)
		})
	}
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeHTTPS: --https-cert and --https-key serve the API over TLS.
func TestServeHTTPS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--addr", "127.0.0.1:0", "--dir", t.TempDir(), "--https-cert", certFile, "--https-key", keyFile},
			&bytes.Buffer{}, &bytes.Buffer{}, serveEnv{listening: func(u string) { urls <- u }})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	}
	require.True(t, strings.HasPrefix(url, "https://"), url)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := c.Post(url+"/v1/sessions", "application/json", strings.NewReader(`{"id":"s"}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	// Plain HTTP is not served.
	res, err = http.Get("http" + strings.TrimPrefix(url, "https") + "/healthz")
	if err == nil {
		res.Body.Close()
		require.Equal(t, http.StatusBadRequest, res.StatusCode)
	}
	c.CloseIdleConnections()
	cancel()
	require.NoError(t, <-done)
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns them with a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dsh test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
