package segment

import (
	"fmt"

	"github.com/cockroachdb/pebble/vfs"
)

// The tests' readers of segment files on the default file system.

// ReadFile is ReadFileFS on the default file system.
func ReadFile(path string) (second int64, entries []Entry, err error) {
	return ReadFileFS(vfs.Default, path)
}

// ReadAt reads the single record at offset off of the segment file path.
func ReadAt(path string, off int64) (Record, error) {
	f, err := vfs.Default.Open(path)
	if err != nil {
		return Record{}, fmt.Errorf("read segment record: %w", err)
	}
	defer f.Close()
	return readRecordAt(f, path, off)
}

// ListDir is ListFS on the default file system.
func ListDir(dir string) ([]int64, error) { return ListFS(vfs.Default, dir) }
