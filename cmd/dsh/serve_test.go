package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := make(chan string, 1)
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--addr", "127.0.0.1:0", "--dir", dir, "--token-file", tokFile}, &bytes.Buffer{}, &stderr,
			serveEnv{listening: func(u string) { urls <- u }})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("serve ended early: %v: %s", err, stderr.String())
	}
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
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}
