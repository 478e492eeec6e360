package segment

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

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
