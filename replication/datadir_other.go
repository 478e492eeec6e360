//go:build !unix

package replication

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/cockroachdb/pebble/vfs"
)

// lockDataDir takes the lock of the data dir dir (<dir>/LOCK) without
// waiting, so that a second node started on a data dir in use fails at once.
func lockDataDir(dir string) (io.Closer, error) {
	l, err := vfs.Default.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("%w: data dir %s is in use: %w", ErrDataDirLocked, dir, err)
	}
	return l, nil
}
