package vfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// lockFSes are the file systems the lock tests run on: the OS (in a
// temp dir) and MemFS, each behind Killable too (which must not change
// anything before Kill).
var lockFSes = map[string]func(t *testing.T) (FS, string){
	"os":           func(t *testing.T) (FS, string) { return OS(), t.TempDir() },
	"mem":          func(t *testing.T) (FS, string) { return NewMem(), "/" },
	"killable-os":  func(t *testing.T) (FS, string) { return Killable(OS()), t.TempDir() },
	"killable-mem": func(t *testing.T) (FS, string) { return Killable(NewMem()), "/" },
}

// requireLocked checks that err refuses a lock of path held by holder.
func requireLocked(t *testing.T, err error, path, holder string) {
	t.Helper()
	require.ErrorIs(t, err, ErrLocked)
	var le *lockedError
	require.ErrorAs(t, err, &le)
	require.Equal(t, path, le.path)
	got, locked := LockHolder(err)
	require.True(t, locked)
	require.Equal(t, holder, got)
	require.Contains(t, err.Error(), holder)
}

func TestLockExcludesWithinOneProcess(t *testing.T) {
	for name, mk := range lockFSes {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			p := filepath.Join(root, "session.lock")
			a, err := fsys.Lock(p, []byte("writer a\n"))
			require.NoError(t, err)
			fi, err := fsys.Stat(p)
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "a new lock file is private")
			require.Equal(t, "writer a\n", readString(t, fsys, p))

			_, err = fsys.Lock(p, []byte("writer b"))
			requireLocked(t, err, p, "writer a")
			require.Equal(t, "writer a\n", readString(t, fsys, p), "a refused Lock does not touch the file")

			require.NoError(t, a.Release())
			require.NoError(t, a.Release(), "Release is idempotent")
			require.Equal(t, "", readString(t, fsys, p), "a released lock names no holder")
			b, err := fsys.Lock(p, []byte("b"))
			require.NoError(t, err)
			require.Equal(t, "b", readString(t, fsys, p), "the holder text replaces the old one")
			_, err = fsys.Lock(p, nil)
			requireLocked(t, err, p, "b")
			require.NoError(t, b.Release())

			// A lock file is never removed: it stays after Release.
			_, err = fsys.Stat(p)
			require.NoError(t, err)
			_, err = fsys.Lock(filepath.Join(root, "missing", "x.lock"), nil)
			require.ErrorIs(t, err, fs.ErrNotExist)
		})
	}
}

// Many goroutines race for one lock: at each instant at most one holds
// it.
func TestLockRace(t *testing.T) {
	for name, mk := range lockFSes {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			p := filepath.Join(root, "race.lock")
			var mu sync.Mutex
			holders, wins := 0, 0
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() {
					for range 50 {
						l, err := fsys.Lock(p, fmt.Appendf(nil, "g%d", i))
						if errors.Is(err, ErrLocked) {
							continue
						}
						if err != nil {
							errs[i] = err
							return
						}
						mu.Lock()
						holders++
						wins++
						both := holders > 1
						mu.Unlock()
						if both {
							errs[i] = errors.New("two holders at once")
						}
						mu.Lock()
						holders--
						mu.Unlock()
						if err := l.Release(); err != nil {
							errs[i] = err
							return
						}
					}
				})
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			require.Positive(t, wins)
		})
	}
}

func TestMemLockCrashCloneAndInjection(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d", 0o700))
	l, err := m.Lock("/d/x.lock", []byte("holder"))
	require.NoError(t, err)
	require.Equal(t, 1, m.OpenFiles(), "a held lock counts as an open handle")
	require.NoError(t, m.SyncDir("/"))
	require.NoError(t, m.SyncDir("/d"))

	// Hard links share the lock, as they share the inode.
	require.NoError(t, m.Link("/d/x.lock", "/d/y.lock"))
	_, err = m.Lock("/d/y.lock", nil)
	requireLocked(t, err, "/d/y.lock", "holder")

	// The process that held the lock died with the crash: the clone's
	// file (its name was synced, its text never) is free and empty.
	c := m.CrashClone()
	require.Equal(t, "", readString(t, c, "/d/x.lock"))
	cl, err := c.Lock("/d/x.lock", []byte("recovery"))
	require.NoError(t, err)
	require.NoError(t, cl.Release())
	_, err = m.Lock("/d/x.lock", nil)
	require.ErrorIs(t, err, ErrLocked, "the clone's locks are its own")

	var seen []string
	m.InjectError(func(op Op, path string) error {
		seen = append(seen, op.String()+" "+path)
		if op == OpLock {
			return ErrInjected
		}
		return nil
	})
	_, err = m.Lock("/d/z.lock", nil)
	require.ErrorIs(t, err, ErrInjected)
	require.Equal(t, []string{"lock /d/z.lock"}, seen)
	require.NoError(t, l.Release(), "Release is not injectable")
	m.InjectError(nil)
	_, err = m.Stat("/d/z.lock")
	require.ErrorIs(t, err, fs.ErrNotExist, "a failed Lock creates nothing")
	require.Zero(t, m.OpenFiles())
	require.NoError(t, m.MkdirAll("/d/dir.lock", 0o700))
	_, err = m.Lock("/d/dir.lock", nil)
	require.Error(t, err, "a directory is not a lock file")
}

// The environment variable that makes TestLockAcrossProcesses the child:
// the path of the lock file to take.
const lockChildEnv = "DSH_VFS_LOCK_CHILD"

// TestLockAcrossProcesses re-executes the test binary as a child that
// takes a lock and reports it on stdout, then waits. The parent is
// refused the lock with the child's holder text; once the child is killed
// (the kernel drops its locks) the parent takes it.
func TestLockAcrossProcesses(t *testing.T) {
	if path := os.Getenv(lockChildEnv); path != "" {
		lockChild(t, path)
		return
	}
	p := filepath.Join(t.TempDir(), "session.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+p)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the child did not report: %q", line)
	holder, ok := strings.CutPrefix(strings.TrimSpace(line), "locked ")
	require.True(t, ok, "the child reported %q", line)
	require.Equal(t, fmt.Sprintf("child pid %d", cmd.Process.Pid), holder)

	_, err = OS().Lock(p, []byte("parent"))
	requireLocked(t, err, p, holder)

	require.NoError(t, cmd.Process.Kill())
	require.Error(t, cmd.Wait(), "the child was killed")
	l, err := OS().Lock(p, []byte("parent"))
	require.NoError(t, err, "a killed process holds no lock")
	require.NoError(t, l.Release())
}

// lockChild is the child's side: take the lock, say so, and hold it until
// stdin closes (or the parent kills the process).
func lockChild(t *testing.T, path string) {
	l, err := OS().Lock(path, fmt.Appendf(nil, "child pid %d\n", os.Getpid()))
	require.NoError(t, err)
	_, err = fmt.Fprintf(os.Stdout, "locked child pid %d\n", os.Getpid())
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, os.Stdin)
	require.NoError(t, l.Release())
}

// BenchmarkLockRelease takes and gives up a lock file on the OS file
// system: what a writer pays once per session (and once more per
// passivation), never per append.
func BenchmarkLockRelease(b *testing.B) {
	p := filepath.Join(b.TempDir(), "session.lock")
	holder := []byte("pid 1 on bench\n")
	b.ReportAllocs()
	for b.Loop() {
		l, err := OS().Lock(p, holder)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
