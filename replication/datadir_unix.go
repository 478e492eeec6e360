//go:build unix

package replication

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDataDir takes the lock of the data dir dir (<dir>/LOCK, an flock held
// while the node is open) without waiting, so that a second node started
// on a data dir in use fails at once instead of blocking in its stores.
// The holder's process id is written in the file, for the next one's error.
func lockDataDir(dir string) (io.Closer, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = "process " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("%w: data dir %s is in use by %s (its lock %s is held); stop that node or choose another --data-dir",
				ErrDataDirLocked, dir, holder, path)
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	return f, nil // closing the file releases the lock
}
