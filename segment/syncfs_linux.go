package segment

import (
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/vfs"
	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's dirty pages, without
// waiting for them. It is a hint: a file without a descriptor (an
// in-memory file system) or an error leaves the pages to the next Sync.
func startWriteback(f vfs.File) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
}

// syncFilesystem flushes every dirty page and inode of the file system
// holding dir to stable storage (syncfs(2)), and waits for it.
func syncFilesystem(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}
