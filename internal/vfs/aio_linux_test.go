//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || mips64le)

package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The structures handed to the kernel have its layout (include/uapi/linux/aio_abi.h).
func TestAIOStructLayout(t *testing.T) {
	require.EqualValues(t, 64, unsafe.Sizeof(iocb{}))
	require.EqualValues(t, 16, unsafe.Offsetof(iocb{}.opcode))
	require.EqualValues(t, 20, unsafe.Offsetof(iocb{}.fildes))
	require.EqualValues(t, 56, unsafe.Offsetof(iocb{}.flags))
	require.EqualValues(t, 60, unsafe.Offsetof(iocb{}.resfd))
	require.EqualValues(t, 32, unsafe.Sizeof(ioEvent{}))
	require.EqualValues(t, 16, unsafe.Offsetof(ioEvent{}.res))
}

// With more goroutines waiting for a processor than schedulerBusy allows,
// Datasync and SyncDir of real files go through the kernel's AIO (its
// waiters are kept for reuse once done), from many goroutines at once, and
// leave no request behind.
func TestSyncsGoThroughTheKernelsAIOWhenTheSchedulerIsBusy(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	var spin sync.WaitGroup
	deadline := time.Now().Add(10 * time.Second) // a bound, should the syncs never end
	for range 2 * busyPerProc * runtime.GOMAXPROCS(0) {
		spin.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched() // runnable all the time
				}
				if i%1024 == 0 && time.Now().After(deadline) {
					return
				}
			}
		})
	}
	defer spin.Wait()
	defer close(stop)
	submitted := func() uint64 {
		if aio == nil {
			return 0
		}
		aio.mu.Lock()
		defer aio.mu.Unlock()
		return aio.next
	}
	before := submitted()
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				errs[i] = err
				return
			}
			_, err = f.Write([]byte("data\n"))
			if err == nil {
				err = Datasync(f)
			}
			errs[i] = errors.Join(err, f.Close())
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, OS().SyncDir(dir))
	if !kernelGrantsAIO() {
		// A kernel or sandbox without AIO: every sync above was the
		// system call, and succeeded.
		require.Nil(t, aio, "an AIO context where the kernel refuses one")
		return
	}
	require.NotNil(t, aio, "no AIO context though the kernel grants one")
	require.Greater(t, submitted(), before, "no sync went through AIO")
	aio.mu.Lock()
	defer aio.mu.Unlock()
	require.Empty(t, aio.waiters, "requests whose completion was not collected")
	require.LessOrEqual(t, len(aio.idle), n+1, "waiters kept: at most one per sync at once")
}

// kernelGrantsAIO reports whether this kernel (or sandbox) makes an AIO
// context, by making one and destroying it.
func kernelGrantsAIO() bool {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return false
	}
	_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	return true
}

// A file the kernel cannot sync through AIO (a character device has no
// fsync) is synced by the system call, which reports the error it always
// did.
func TestDatasyncFallsBackToTheSystemCall(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	err = Datasync(f)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "fdatasync", pe.Op)
	require.ErrorIs(t, err, unix.EINVAL)
}

// BenchmarkDatasyncUnderLoad measures what docs/performance.md#fsync-completions
// is about: 32 goroutines each appending 2.5 KB to a file of their own and
// fdatasyncing it, while pairs of goroutines hand a token back and forth
// with some CPU work at each hop (-load pairs; the shape of a busy actor
// system), through AIO (impl=aio) and as system calls (impl=syscall).
// Each op is one write+fdatasync; it reports their p50 and p99.
//
//	go test -run '^$' -bench DatasyncUnderLoad -benchtime 2000x ./internal/vfs/
func BenchmarkDatasyncUnderLoad(b *testing.B) {
	for _, pairs := range []int{0, 100} {
		for _, impl := range []string{"aio", "syscall"} {
			b.Run(fmt.Sprintf("load=%d/impl=%s", pairs, impl), func(b *testing.B) {
				defer func(old bool) { useAIO = old }(useAIO)
				useAIO = impl == "aio"
				benchDatasyncUnderLoad(b, pairs)
			})
		}
	}
}

func benchDatasyncUnderLoad(b *testing.B, pairs int) {
	const workers = 32
	dir := b.TempDir()
	stop := make(chan struct{})
	var load sync.WaitGroup
	var sink atomic.Int64
	work := func() {
		x := 0
		for i := range 3000 {
			x += i * i
		}
		sink.Add(int64(x))
	}
	for range pairs {
		ping, pong := make(chan struct{}, 1), make(chan struct{}, 1)
		hop := func(in, out chan struct{}) {
			for {
				select {
				case <-stop:
					return
				case <-in:
					work()
					out <- struct{}{}
				}
			}
		}
		load.Go(func() { hop(ping, pong) })
		load.Go(func() { hop(pong, ping) })
		ping <- struct{}{}
	}
	defer func() {
		close(stop)
		load.Wait()
	}()
	files := make([]*os.File, workers)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	data := make([]byte, 2500)
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := files[i].Write(data); err != nil {
					b.Error(err)
					return
				}
				if err := Datasync(files[i]); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100])/1e6, "p99-ms")
}
