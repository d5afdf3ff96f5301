package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeFile creates name with perm, writes data, optionally syncs, closes.
func writeFile(t *testing.T, fsys FS, name string, data string, sync bool) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	_, err = f.Write([]byte(data))
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func readString(t *testing.T, fsys FS, name string) string {
	t.Helper()
	b, err := ReadFile(fsys, name)
	require.NoError(t, err)
	return string(b)
}

// TestFSBasics runs the same operations on MemFS and on the OS, so MemFS
// is checked against the behaviour it imitates.
func TestFSBasics(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) (FS, string){
		"mem": func(t *testing.T) (FS, string) { return NewMem(), "/r" },
		"os":  func(t *testing.T) (FS, string) { return OS(), t.TempDir() },
	} {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			dir := filepath.Join(root, "a", "b")
			require.NoError(t, fsys.MkdirAll(dir, 0o700))
			require.NoError(t, fsys.MkdirAll(dir, 0o700), "MkdirAll of an existing dir")
			fi, err := fsys.Stat(dir)
			require.NoError(t, err)
			require.True(t, fi.IsDir())
			require.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())

			p := filepath.Join(dir, "f")
			writeFile(t, fsys, p, "hello", true)
			fi, err = fsys.Stat(p)
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
			require.Equal(t, int64(5), fi.Size())
			require.Equal(t, "f", fi.Name())
			require.Equal(t, "hello", readString(t, fsys, p))

			_, err = fsys.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			require.ErrorIs(t, err, fs.ErrExist)
			_, err = fsys.OpenFile(filepath.Join(dir, "missing"), os.O_RDONLY, 0)
			require.ErrorIs(t, err, fs.ErrNotExist)

			// Append, ReadAt, Truncate.
			f, err := fsys.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte(" world"))
			require.NoError(t, err)
			require.NoError(t, f.Truncate(8))
			_, err = f.Write([]byte("!"))
			require.NoError(t, err, "an append after a truncation goes to the new end")
			st, err := f.Stat()
			require.NoError(t, err)
			require.Equal(t, int64(9), st.Size())
			require.NoError(t, f.Close())
			require.Equal(t, "hello wo!", readString(t, fsys, p))
			r, err := fsys.OpenFile(p, os.O_RDONLY, 0)
			require.NoError(t, err)
			buf := make([]byte, 4)
			n, err := r.ReadAt(buf, 6)
			require.Equal(t, 3, n)
			require.ErrorIs(t, err, io.EOF)
			require.Equal(t, "wo!", string(buf[:n]))
			_, err = r.Write([]byte("x"))
			require.Error(t, err, "a read-only handle does not write")
			require.NoError(t, r.Close())

			// Link never replaces.
			q := filepath.Join(dir, "g")
			require.NoError(t, fsys.Link(p, q))
			require.Equal(t, "hello wo!", readString(t, fsys, q))
			writeFile(t, fsys, filepath.Join(dir, "h"), "other", false)
			err = fsys.Link(filepath.Join(dir, "h"), q)
			require.ErrorIs(t, err, fs.ErrExist)
			require.Equal(t, "hello wo!", readString(t, fsys, q))

			entries, err := fsys.ReadDir(dir)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			require.Equal(t, []string{"f", "g", "h"}, names)

			require.NoError(t, fsys.Remove(q))
			_, err = fsys.Stat(q)
			require.ErrorIs(t, err, fs.ErrNotExist)
			require.Error(t, fsys.Remove(filepath.Join(root, "a")), "a non-empty directory")
			require.NoError(t, fsys.SyncDir(dir))
			require.Error(t, fsys.SyncDir(filepath.Join(dir, "nope")))
		})
	}
}

func TestMemModTimeChangesOnEveryWrite(t *testing.T) {
	m := NewMem()
	f, err := m.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	seen := map[int64]bool{}
	stamp := func() {
		fi, err := m.Stat("/f")
		require.NoError(t, err)
		ns := fi.ModTime().UnixNano()
		require.False(t, seen[ns], "mtime %d repeated", ns)
		seen[ns] = true
	}
	stamp()
	for range 3 {
		_, err = f.Write([]byte("ab"))
		require.NoError(t, err)
		stamp()
		require.NoError(t, f.Truncate(1))
		stamp()
	}
	require.NoError(t, f.Close())
}

func TestMemCrashClone(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d", 0o700))

	writeFile(t, m, "/d/unnamed", "data", true)
	// Name durable, data never synced: empty.
	writeFile(t, m, "/d/unsynced", "data", false)
	// Synced, then more written: the synced bytes.
	f, err := m.OpenFile("/d/partial", os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	_, err = f.Write([]byte("old"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.Write([]byte("+new"))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// /d's own entry in / is not durable yet: everything in it is lost.
	require.NoError(t, m.SyncDir("/d"))
	c := m.CrashClone()
	_, err = c.Stat("/d")
	require.ErrorIs(t, err, fs.ErrNotExist, "a directory whose parent was never synced")

	require.NoError(t, m.SyncDir("/"))
	writeFile(t, m, "/d/late", "data", true) // created after /d was synced
	c = m.CrashClone()
	_, err = c.Stat("/d/late")
	require.ErrorIs(t, err, fs.ErrNotExist, "synced data under a name never made durable")
	require.Equal(t, "data", readString(t, c, "/d/unnamed"))
	require.Equal(t, "", readString(t, c, "/d/unsynced"))
	require.Equal(t, "old", readString(t, c, "/d/partial"))
	fi, err := c.Stat("/d/partial")
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "permissions survive")

	// A removal that was not synced is undone by a crash; a synced one is
	// not.
	require.NoError(t, m.Remove("/d/partial"))
	require.Equal(t, "old", readString(t, m.CrashClone(), "/d/partial"))
	require.NoError(t, m.SyncDir("/d"))
	_, err = m.CrashClone().Stat("/d/partial")
	require.ErrorIs(t, err, fs.ErrNotExist)

	// Hard links stay one file in the clone; the clone is independent.
	writeFile(t, m, "/d/x", "linked", true)
	require.NoError(t, m.Link("/d/x", "/d/y"))
	require.NoError(t, m.SyncDir("/d"))
	c = m.CrashClone()
	g, err := c.OpenFile("/d/x", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = g.Write([]byte("!"))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.Equal(t, "linked!", readString(t, c, "/d/y"))
	require.Equal(t, "linked", readString(t, m, "/d/y"), "writes to the clone do not reach the original")

	// Everything a clone starts with is durable; what is written to it
	// later is not, until synced.
	cc := c.CrashClone()
	require.Equal(t, "linked", readString(t, cc, "/d/y"))
	require.Equal(t, "", readString(t, cc, "/d/unsynced"))
}

func TestMemInjectError(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.SyncDir("/"))
	var ops []string
	var failOp Op
	m.InjectError(func(op Op, path string) error {
		ops = append(ops, fmt.Sprintf("%s %s", op, path))
		if op == failOp {
			return ErrInjected
		}
		return nil
	})
	require.NoError(t, m.MkdirAll("/d", 0o700))
	writeFile(t, m, "/d/f", "abc", true)
	require.NoError(t, m.SyncDir("/d"))
	require.NoError(t, m.SyncDir("/"))
	require.Equal(t, []string{"mkdir /d", "open /d/f", "write /d/f", "sync /d/f", "syncdir /d", "syncdir /"}, ops)

	for _, op := range []Op{OpOpen, OpWrite, OpSync, OpTruncate, OpLink, OpRemove, OpMkdir, OpSyncDir, OpRead, OpStat, OpReadDir} {
		t.Run(op.String(), func(t *testing.T) {
			failOp = 0
			f, err := m.OpenFile("/d/f", os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			failOp = op
			var got error
			switch op {
			case OpOpen:
				_, got = m.OpenFile("/d/new", os.O_WRONLY|os.O_CREATE, 0o600)
			case OpWrite:
				_, got = f.Write([]byte("zzz"))
			case OpSync:
				got = f.Sync()
			case OpTruncate:
				got = f.Truncate(0)
			case OpLink:
				got = m.Link("/d/f", "/d/link")
			case OpRemove:
				got = m.Remove("/d/f")
			case OpMkdir:
				got = m.MkdirAll("/e", 0o700)
			case OpSyncDir:
				got = m.SyncDir("/d")
			case OpRead:
				_, got = f.Read(make([]byte, 1))
			case OpStat:
				_, got = m.Stat("/d/f")
			case OpReadDir:
				_, got = m.ReadDir("/d")
			}
			require.ErrorIs(t, got, ErrInjected)
			failOp = 0
			// The failed operation had no effect.
			require.Equal(t, "abc", readString(t, m, "/d/f"))
			require.Equal(t, "abc", readString(t, m.CrashClone(), "/d/f"))
			entries, err := m.ReadDir("/d")
			require.NoError(t, err)
			require.Len(t, entries, 1)
			_, err = m.Stat("/e")
			require.ErrorIs(t, err, fs.ErrNotExist)
		})
	}
}

func TestMemShortWrite(t *testing.T) {
	m := NewMem()
	f, err := m.OpenFile("/f", os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	full := errors.New("disk full")
	m.InjectError(func(op Op, _ string) error {
		if op == OpWrite {
			return &ShortWrite{N: 2, Err: full}
		}
		return nil
	})
	n, err := f.Write([]byte("abcdef"))
	require.Equal(t, 2, n)
	require.ErrorIs(t, err, full)
	m.InjectError(func(op Op, _ string) error {
		if op == OpWrite {
			return &ShortWrite{N: 100}
		}
		return nil
	})
	n, err = f.Write([]byte("xy"))
	require.Equal(t, 2, n, "N is capped at the write's length")
	require.ErrorIs(t, err, ErrInjected)
	m.InjectError(nil)
	require.NoError(t, f.Close())
	require.Equal(t, "abxy", readString(t, m, "/f"))
}

// An injector may take a crash clone in the middle of an operation: the
// clone is the state just before it.
func TestMemCrashInsideInjector(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d", 0o700))
	require.NoError(t, m.SyncDir("/"))
	var crashed *MemFS
	m.InjectError(func(op Op, _ string) error {
		if op == OpSyncDir {
			crashed = m.CrashClone()
			return ErrInjected
		}
		return nil
	})
	writeFile(t, m, "/d/f", "abc", true)
	require.ErrorIs(t, m.SyncDir("/d"), ErrInjected)
	require.NotNil(t, crashed)
	_, err := crashed.Stat("/d/f")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestMemOpenFilesAndClosedHandles(t *testing.T) {
	m := NewMem()
	f, err := m.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	g, err := m.OpenFile("/f", os.O_RDONLY, 0)
	require.NoError(t, err)
	require.Equal(t, 2, m.OpenFiles())
	require.NoError(t, f.Close())
	require.ErrorIs(t, f.Close(), fs.ErrClosed)
	_, err = f.Write([]byte("x"))
	require.ErrorIs(t, err, fs.ErrClosed)
	require.NoError(t, g.Close())
	require.Equal(t, 0, m.OpenFiles())

	// A handle keeps its file after the name goes, like a descriptor.
	h, err := m.OpenFile("/f", os.O_WRONLY, 0)
	require.NoError(t, err)
	require.NoError(t, m.Link("/f", "/g"))
	require.NoError(t, m.Remove("/f"))
	_, err = h.Write([]byte("kept"))
	require.NoError(t, err)
	require.NoError(t, h.Close())
	require.Equal(t, "kept", readString(t, m, "/g"))
	_, err = m.OpenFile("/../x", os.O_RDONLY, 0)
	require.ErrorIs(t, err, fs.ErrNotExist, "/.. is the root, as on the OS")
}

func TestMemConcurrentUse(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d", 0o700))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("/d/f%d", i)
			f, err := m.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			for range 50 {
				if _, err := f.Write([]byte("x")); err != nil {
					t.Error(err)
				}
				_ = f.Sync()
				_ = m.SyncDir("/d")
				_ = m.CrashClone()
			}
			_ = f.Close()
		})
	}
	wg.Wait()
	entries, err := m.ReadDir("/d")
	require.NoError(t, err)
	require.Len(t, entries, 8)
	for _, e := range entries {
		require.Len(t, readString(t, m, "/d/"+e.Name()), 50)
	}
}

func TestOpString(t *testing.T) {
	require.Equal(t, "syncdir", OpSyncDir.String())
	require.Equal(t, "Op(99)", Op(99).String())
}

func TestMemCrashCloneWithTornTail(t *testing.T) {
	m := NewMem()
	f, err := m.OpenFile("/f", os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, m.SyncDir("/"))
	_, err = f.Write([]byte("synced|"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.Write([]byte("unsynced"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	c := m.CrashCloneWith(func(synced, current []byte) []byte {
		require.Equal(t, "synced|", string(synced))
		require.Equal(t, "synced|unsynced", string(current))
		return current[:len(synced)+3]
	})
	require.Equal(t, "synced|uns", readString(t, c, "/f"))
	require.Equal(t, "synced|uns", readString(t, c.CrashClone(), "/f"), "what the clone starts with is durable")
}

// DropUnsynced keeps a file's synced bytes and the prefix of its unsynced
// ones that keep chooses, for every choice; a sync through another
// descriptor covers bytes written through one closed since; a file
// truncated since its last sync keeps its synced bytes.
func TestMemDropUnsyncedSuffix(t *testing.T) {
	m := NewMem()
	w, err := m.OpenFile("/f", os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, m.SyncDir("/"))
	_, err = w.Write([]byte("ab"))
	require.NoError(t, err)
	require.NoError(t, w.Sync())
	_, err = w.Write([]byte("cd"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	w, err = m.OpenFile("/f", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = w.Write([]byte("ef"))
	require.NoError(t, err)
	for k := -1; k <= 5; k++ {
		var saw []int
		c := m.CrashCloneWith(DropUnsynced(func(n int) int { saw = append(saw, n); return k }))
		require.Equal(t, []int{4}, saw, "called once, with the unsynced count")
		require.Equal(t, "abcdef"[:2+min(max(k, 0), 4)], readString(t, c, "/f"), "keep %d", k)
	}
	require.NoError(t, Datasync(w), "a sync through the second descriptor")
	c := m.CrashCloneWith(DropUnsynced(func(int) int { t.Fatal("nothing is unsynced"); return 0 }))
	require.Equal(t, "abcdef", readString(t, c, "/f"))
	require.NoError(t, w.Truncate(3))
	_, err = w.Write([]byte("xyz"))
	require.NoError(t, err)
	c = m.CrashCloneWith(DropUnsynced(func(int) int { return 99 }))
	require.Equal(t, "abcdef", readString(t, c, "/f"), "an unsynced truncation is not kept")
	require.NoError(t, w.Close())
}

// CrashCloneEntries keeps every name, durable or not, each file with what
// keep chooses: a file created and written but never synced survives
// empty; CrashCloneWith loses its name.
func TestMemCrashCloneEntries(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/d", 0o700))
	f, err := m.OpenFile("/d/f", os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	_, err = f.Write([]byte("unsynced"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = m.CrashClone().Stat("/d")
	require.ErrorIs(t, err, fs.ErrNotExist, "no entry was synced")
	require.Equal(t, "", readString(t, m.CrashCloneEntries(nil), "/d/f"))
	require.Equal(t, "unsy", readString(t, m.CrashCloneEntries(DropUnsynced(func(int) int { return 4 })), "/d/f"))
	c := m.CrashCloneEntries(nil)
	require.NoError(t, c.Remove("/d/f"))
	_, err = m.Stat("/d/f")
	require.NoError(t, err, "the clone shares nothing with m")
}
