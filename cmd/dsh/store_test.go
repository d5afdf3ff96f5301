package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --store names the store for run and sessions, by URL or bare path, and
// means the same store as --dir; both at once is bad usage.
func TestStoreFlagNamesTheStore(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "")
	dir, wd := t.TempDir(), t.TempDir()
	code, _, errOut := runDsh("run", "--store", "jsonl:"+dir, "--workdir", wd, "hello")
	require.Equal(t, exitOK, code, errOut)
	id := sessionFrom(t, errOut)

	// The same store through --dir, and through a bare path.
	code, _, errOut = runDsh("run", "--dir", dir, "--workdir", wd, "--session", id, "again")
	require.Equal(t, exitOK, code, errOut)
	code, _, errOut = runDsh("run", "--store", dir, "--workdir", wd, "--session", id, "and again")
	require.Equal(t, exitOK, code, errOut)
	for _, args := range [][]string{{"--store", "jsonl:" + dir}, {"--store", dir}, {"--dir", dir}} {
		code, out, errOut := runDsh(append([]string{"sessions", "--json"}, args...)...)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, `"id":"`+id+`"`, args)
	}

	for _, args := range [][]string{
		{"run", "--dir", dir, "--store", "jsonl:" + dir, "hi"},
		{"chat", "--dir", dir, "--store", "jsonl:" + dir},
		{"sessions", "--dir", dir, "--store", "jsonl:" + dir},
		{"member", "--dir", dir, "--store", "jsonl:" + dir},
	} {
		code, out, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, args)
		require.Empty(t, out)
		require.True(t, strings.HasPrefix(errOut, "dsh: "), errOut)
		require.Contains(t, strings.SplitN(errOut, "\n", 2)[0], "--dir and --store both given", args)
	}
	for _, args := range [][]string{
		{"run", "--store", "sqlit:" + dir, "hi"},
		{"sessions", "--store", "jsonl:"},
	} {
		code, _, errOut := runDsh(args...)
		require.Equal(t, exitUsage, code, args)
		require.Contains(t, errOut, "--store", args)
	}
	code, _, errOut = runDsh("run", "--store", "jsonl:"+dir, "--peers", "127.0.0.1:1", "hi")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--store goes without --peers")
}

// dsh run writes to and resumes from a SQLite store; the read-only
// commands read it while nothing holds it.
func TestRunOnASQLiteStore(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "")
	db, wd := filepath.Join(t.TempDir(), "dsh.db"), t.TempDir()
	code, _, errOut := runDsh("run", "--store", "sqlite:"+db, "--workdir", wd, "hello")
	require.Equal(t, exitOK, code, errOut)
	id := sessionFrom(t, errOut)
	code, _, errOut = runDsh("run", "--store", "sqlite:"+db, "--workdir", wd, "--session", id, "again")
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut := runDsh("log", "messages", "--store", "sqlite:"+db, "--session", id)
	require.Equal(t, exitOK, code, errOut)
	require.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), 4, "two prompts, two answers")
	code, out, errOut = runDsh("log", "verify", "--store", "sqlite:"+db, "--session", id)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, ": ok: ")
	code, _, errOut = runDsh("run", "--store", "sqlite:"+db, "--session", "nope", "hi")
	require.Equal(t, exitFailure, code)
	require.Equal(t, "dsh: no session nope under sqlite:"+db+"\n", errOut)
}

// A cluster shares a JSONL directory: dsh member refuses a SQLite store
// with one line that says why, and takes --store jsonl:DIR as --dir DIR.
func TestMemberRefusesASQLiteStore(t *testing.T) {
	db := filepath.Join(t.TempDir(), "dsh.db")
	code, out, errOut := runDsh("member", "--store", "sqlite:"+db)
	require.Equal(t, exitFailure, code)
	require.Empty(t, out)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, "a cluster shares a JSONL directory")
	require.Contains(t, errOut, "a SQLite file on a network file system is not safe for several writers")
	require.NoFileExists(t, db)

	code, _, errOut = runDsh("member")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--dir is required")
}

// dsh bench --store jsonl:DIR writes into DIR and keeps it, as --dir does;
// --dir and --store together are bad usage.
func TestBenchStoreKeepsTheStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench")
	code, out, errOut := runDsh("bench", "--store", "jsonl:"+dir, "--sessions", "3", "--turns", "1", "--chunks", "5",
		"--no-baselines", "--quiet", "--json")
	require.Equal(t, exitOK, code, errOut)
	var rep struct {
		Dir      string `json:"dir"`
		Verified int    `json:"files_verified"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, dir, rep.Dir)
	require.Equal(t, 3, rep.Verified)
	code, out, errOut = runDsh("sessions", "--json", "--store", "jsonl:"+dir)
	require.Equal(t, exitOK, code, errOut)
	var rows []sessionRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3, "the directory was kept")

	// A database, the same way: kept, verified through the store.
	db := filepath.Join(t.TempDir(), "bench.db")
	code, out, errOut = runDsh("bench", "--store", "sqlite:"+db, "--sessions", "3", "--turns", "1", "--chunks", "5",
		"--no-baselines", "--quiet", "--json")
	require.Equal(t, exitOK, code, errOut)
	var dbRep struct {
		Store    string `json:"store"`
		Verified int    `json:"files_verified"`
		OnDisk   int64  `json:"bytes_on_disk"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dbRep))
	require.Equal(t, "sqlite:"+db, dbRep.Store)
	require.Equal(t, 3, dbRep.Verified)
	require.Positive(t, dbRep.OnDisk)
	code, out, errOut = runDsh("sessions", "--json", "--store", "sqlite:"+db)
	require.Equal(t, exitOK, code, errOut)
	rows = nil
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3, "the database was kept")

	code, _, errOut = runDsh("bench", "--dir", dir, "--store", "jsonl:"+dir, "--quiet")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--dir and --store both given")
	code, _, errOut = runDsh("bench", "--store", "sqlite:"+filepath.Join(dir, "x.db"), "--cluster", "2", "--quiet")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "a cluster shares a JSONL directory")
}
