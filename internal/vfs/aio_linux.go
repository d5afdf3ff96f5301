//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || mips64le)

package vfs

import (
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A sync submitted to the kernel's asynchronous I/O instead of made as a
// blocking system call (docs/performance.md#fsync-completions).
//
// A goroutine that comes back from a blocking system call whose processor
// was handed to another thread meanwhile (every fdatasync lasts long
// enough for that) is queued at the back of the scheduler's global run
// queue, which a busy processor serves once in 61 scheduling rounds.
// Under a thousand sessions' actor goroutines that kept each fsync
// worker of the persister waiting 15 ms on average (45 ms at the 90th
// percentile) for a processor after a 1-3 ms fdatasync, so the workers
// turned over slowly and turn ends queued behind them. Here the caller
// submits an IOCB_CMD_FDSYNC (IOCB_CMD_FSYNC) request, which the kernel
// carries out on a thread of its own with the same vfs_fsync, errors
// included, and waits for it in the network poller: on an eventfd of its
// own that the kernel signals when the request completes (which wakes it
// at once when the process is idle), with a read deadline of aioPoll (a
// timer, which readies it ahead of the run queue when the process is
// busy and the poller is not looked at). Any waiter collects whatever
// completions there are, without blocking, and marks their waiters done.
// Only while the scheduler is busy (schedulerBusy): otherwise the system
// call's return finds a processor soon, and is quicker.
//
// Where the kernel refuses (no AIO in this kernel or sandbox, a file
// without fsync support for it, the context full) the sync is the plain
// system call, as before.

// aioPoll is how long a waiter sleeps between two looks at the
// completions when its eventfd has not woken it.
const aioPoll = 250 * time.Microsecond

// aioEvents is the most syncs in flight at once through AIO; more fall
// back to the system call.
const aioEvents = 1024

const (
	iocbCmdFsync  = 2
	iocbCmdFdsync = 3
	iocbFlagResfd = 1 << 0
)

// iocb is the kernel's struct iocb on a 64-bit little-endian machine
// (the blank fields are aio_key, aio_rw_flags, aio_reqprio, aio_buf,
// aio_nbytes, aio_offset and aio_reserved2, zero for a sync).
type iocb struct {
	data   uint64
	_      uint32
	_      int32
	opcode uint16
	_      int16
	fildes uint32
	_      [4]uint64
	flags  uint32
	resfd  uint32
}

// ioEvent is the kernel's struct io_event.
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

// aioContext is the process's AIO context and its waiters. Safe for
// concurrent use.
type aioContext struct {
	ctx uintptr

	mu      sync.Mutex // guards next, waiters, idle
	next    uint64
	waiters map[uint64]*aioWaiter // by request, until its completion is collected
	idle    []*aioWaiter          // waiters with an eventfd, not in use
}

// aioWaiter waits for one request at a time. res is set before done.
type aioWaiter struct {
	efd  *os.File // the eventfd the kernel signals on completion
	fd   int
	done atomic.Bool
	res  int64
}

var (
	aioOnce sync.Once
	aio     *aioContext // nil: the kernel refused a context
	// useAIO is false to make every sync a system call (benchmarks).
	useAIO = true
)

// aioSync syncs fd through the kernel's AIO (only data and size if
// datasync) and returns its outcome; taken is false if the kernel did not
// take the request, and then nothing was done.
func aioSync(fd uintptr, datasync bool) (taken bool, err error) {
	if !useAIO || !schedulerBusy() {
		return false, nil
	}
	aioOnce.Do(func() {
		var ctx uintptr
		if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, aioEvents, uintptr(unsafe.Pointer(&ctx)), 0); e == 0 {
			aio = &aioContext{ctx: ctx, waiters: map[uint64]*aioWaiter{}}
		}
	})
	if aio == nil {
		return false, nil
	}
	return aio.sync(fd, datasync)
}

// runnableMetric counts the goroutines waiting for a processor.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// schedulerBusy reports whether more goroutines wait for a processor than
// busyPerProc per processor: enough that a goroutine back from a long
// system call would queue behind them. A sync when the scheduler is not
// busy is the system call: its return then finds a processor soon, and is
// quicker than a completion seen through the poller (a single session's
// barriers one after the other, an idle process).
func schedulerBusy() bool {
	s := [1]metrics.Sample{{Name: runnableMetric}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return false
	}
	return s[0].Value.Uint64() > uint64(busyPerProc*runtime.GOMAXPROCS(0))
}

// busyPerProc is schedulerBusy's bound: runnable goroutines per processor.
const busyPerProc = 4

func (a *aioContext) sync(fd uintptr, datasync bool) (taken bool, err error) {
	w := a.waiter()
	if w == nil {
		return false, nil
	}
	defer a.putWaiter(w)
	cb := &iocb{opcode: iocbCmdFsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(w.fd)}
	if datasync {
		cb.opcode = iocbCmdFdsync
	}
	a.mu.Lock()
	a.next++
	cb.data = a.next
	a.waiters[cb.data] = w
	a.mu.Unlock()
	cbs := [1]*iocb{cb}
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
	if e != 0 || n != 1 {
		a.mu.Lock()
		delete(a.waiters, cb.data)
		a.mu.Unlock()
		return false, nil
	}
	var buf [8]byte
	for {
		_ = w.efd.SetReadDeadline(time.Now().Add(aioPoll))
		_, _ = w.efd.Read(buf[:]) // a completion signalled, or the deadline
		a.collect()
		if w.done.Load() {
			break
		}
	}
	if w.res < 0 {
		return true, unix.Errno(-w.res)
	}
	return true, nil
}

// collect takes the completions there are, without waiting, and marks
// their waiters done.
func (a *aioContext) collect() {
	var evs [64]ioEvent
	var zero unix.Timespec
	n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 0, uintptr(len(evs)),
		uintptr(unsafe.Pointer(&evs[0])), uintptr(unsafe.Pointer(&zero)), 0)
	if e != 0 || n == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs[:n] {
		if w := a.waiters[ev.data]; w != nil {
			delete(a.waiters, ev.data)
			w.res = ev.res
			w.done.Store(true)
		}
	}
}

// waiter returns an idle waiter, or a new one (nil if no eventfd could
// be made). Waiters are kept for reuse, never closed: there are at most
// as many as syncs ever ran at once.
func (a *aioContext) waiter() *aioWaiter {
	a.mu.Lock()
	if k := len(a.idle); k > 0 {
		w := a.idle[k-1]
		a.idle = a.idle[:k-1]
		a.mu.Unlock()
		w.done.Store(false)
		return w
	}
	a.mu.Unlock()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return &aioWaiter{efd: os.NewFile(uintptr(fd), "aio-eventfd"), fd: fd}
}

func (a *aioContext) putWaiter(w *aioWaiter) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.idle = append(a.idle, w)
}
