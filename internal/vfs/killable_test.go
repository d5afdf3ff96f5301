package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKillable(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) (FS, string){
		"os":  func(t *testing.T) (FS, string) { return OS(), t.TempDir() },
		"mem": func(t *testing.T) (FS, string) { return NewMem(), "/" },
	} {
		t.Run(name, func(t *testing.T) {
			inner, root := mk(t)
			k := Killable(inner)
			dir := filepath.Join(root, "s")
			require.NoError(t, k.MkdirAll(dir, 0o700))
			lockPath, logPath := filepath.Join(dir, "session.lock"), filepath.Join(dir, "log")
			l, err := k.Lock(lockPath, []byte("member a"))
			require.NoError(t, err)
			f, err := k.OpenFile(logPath, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
			require.NoError(t, err)
			_, err = f.Write([]byte("written before the kill"))
			require.NoError(t, err)
			// A handle closed before the kill is not closed again.
			g, err := k.OpenFile(logPath, os.O_RDONLY, 0)
			require.NoError(t, err)
			require.NoError(t, g.Close())
			_, err = inner.Lock(lockPath, nil)
			requireLocked(t, err, lockPath, "member a")

			k.Kill()
			k.Kill() // idempotent

			// The kernel dropped the lock: another process takes it.
			other, err := inner.Lock(lockPath, []byte("member b"))
			require.NoError(t, err)
			require.Equal(t, "written before the kill", readString(t, inner, logPath), "a kill keeps completed writes")
			if m, ok := inner.(*MemFS); ok {
				require.Equal(t, 1, m.OpenFiles(), "only the other member's lock is open")
			}

			// Every later operation fails, on the FS and on what it opened.
			_, err = f.Write([]byte("x"))
			require.ErrorIs(t, err, ErrKilled)
			_, err = f.Read(make([]byte, 1))
			require.ErrorIs(t, err, ErrKilled)
			_, err = f.ReadAt(make([]byte, 1), 0)
			require.ErrorIs(t, err, ErrKilled)
			require.ErrorIs(t, f.Sync(), ErrKilled)
			require.ErrorIs(t, f.Truncate(0), ErrKilled)
			_, err = f.Stat()
			require.ErrorIs(t, err, ErrKilled)
			require.ErrorIs(t, f.Close(), ErrKilled)
			require.ErrorIs(t, l.Release(), ErrKilled)
			_, err = k.OpenFile(logPath, os.O_RDONLY, 0)
			require.ErrorIs(t, err, ErrKilled)
			_, err = k.Lock(lockPath, nil)
			require.ErrorIs(t, err, ErrKilled)
			require.ErrorIs(t, k.MkdirAll(dir, 0o700), ErrKilled)
			require.ErrorIs(t, k.Link(logPath, logPath+".2"), ErrKilled)
			require.ErrorIs(t, k.Remove(logPath), ErrKilled)
			_, err = k.Stat(logPath)
			require.ErrorIs(t, err, ErrKilled)
			_, err = k.ReadDir(dir)
			require.ErrorIs(t, err, ErrKilled)
			require.ErrorIs(t, k.SyncDir(dir), ErrKilled)
			_, err = ReadFile(k, logPath)
			require.ErrorIs(t, err, ErrKilled)
			var pe *fs.PathError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, logPath, pe.Path)

			require.Equal(t, "written before the kill", readString(t, inner, logPath), "nothing changed after the kill")
			require.NoError(t, other.Release())
			if m, ok := inner.(*MemFS); ok {
				require.Zero(t, m.OpenFiles())
			}
		})
	}
}

// Writers racing with Kill: each write either completes before the kill
// (and stays) or fails with ErrKilled (and writes nothing).
func TestKillableRacesWithKill(t *testing.T) {
	m := NewMem()
	k := Killable(m)
	const writers = 8
	files := make([]File, writers)
	for i := range files {
		f, err := k.OpenFile(fmt.Sprintf("/f%d", i), os.O_WRONLY|os.O_CREATE, 0o600)
		require.NoError(t, err)
		files[i] = f
	}
	written := make([]int, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			<-start
			for {
				n, err := f.Write([]byte("x"))
				written[i] += n
				if err != nil {
					if !errors.Is(err, ErrKilled) {
						errs[i] = err
					}
					return
				}
			}
		})
	}
	close(start)
	k.Kill()
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i := range files {
		fi, err := m.Stat(fmt.Sprintf("/f%d", i))
		require.NoError(t, err)
		require.Equal(t, int64(written[i]), fi.Size(), "file %d", i)
	}
	require.Zero(t, m.OpenFiles(), "Kill closed every handle")
}
