package persister

import "golang.org/x/sys/unix"

// fileIdentity returns the device, inode and birth time (ns) of the file
// at path, for the store identity.
func fileIdentity(path string) (dev, ino uint64, birthNs int64, err error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return 0, 0, 0, err
	}
	dev = unix.Mkdev(st.Dev_major, st.Dev_minor)
	if st.Mask&unix.STATX_BTIME != 0 {
		birthNs = st.Btime.Sec*1e9 + int64(st.Btime.Nsec)
	}
	return dev, st.Ino, birthNs, nil
}
