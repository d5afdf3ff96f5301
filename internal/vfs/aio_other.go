//go:build linux && !(amd64 || arm64 || riscv64 || loong64 || ppc64le || mips64le)

package vfs

// useAIO has no effect where the kernel's struct iocb is not laid out as
// aio_linux.go declares it: every sync is a system call.
var useAIO = false

// aioSync takes no request here (see aio_linux.go).
func aioSync(uintptr, bool) (taken bool, err error) { return false, nil }
