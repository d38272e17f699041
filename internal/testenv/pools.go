package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Address pools for test servers: the /24s 169.254.FirstPool.0 to
// 169.254.LastPool.0, clear of the metadata /24 169.254.169.0 and of the
// bench's 169.254.160.0/20. A pool is held with an exclusive lock on a
// file of its own in PoolLockDir, not only in one process: two test runs
// on one machine (a developer's and CI's, two packages, a bench) must
// never hand out the same address.
const (
	FirstPool, LastPool = 176, 235
	PoolLockDir         = "/tmp/lizard-test-pools"
)

// TakePool locks a free pool and returns its third octet and the release
// that gives it back (closing the lock file drops the lock).
func TakePool() (n int, release func(), err error) {
	if err := os.MkdirAll(PoolLockDir, 0o755); err != nil {
		return 0, nil, fmt.Errorf("making the pool lock directory: %w", err)
	}
	for n := FirstPool; n <= LastPool; n++ {
		f, err := os.OpenFile(filepath.Join(PoolLockDir, fmt.Sprintf("169.254.%d.0", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return 0, nil, fmt.Errorf("opening a pool lock: %w", err)
		}
		// flock conflicts between open files, in this process too.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close() // held by another test or process
			continue
		}
		return n, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("all %d test address pools are in use", LastPool-FirstPool+1)
}
