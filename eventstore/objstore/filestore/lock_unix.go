//go:build unix

package filestore

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lock takes the exclusive flock(2) lock of key's stripe (one of the
// 256 files below lockDir). flock locks belong to the open file,
// so they exclude other goroutines of this process as well as other
// processes sharing the directory.
func (b *Bucket) lock(key string) (unlock func(), err error) {
	sum := sha256.Sum256([]byte(key))
	name := filepath.Join(filepath.FromSlash(lockDir), fmt.Sprintf("%02x", sum[0]))
	f, err := b.root.OpenFile(name, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", mapErr(err))
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
