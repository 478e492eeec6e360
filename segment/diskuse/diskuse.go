package diskuse

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// Counter sums the apparent sizes of regular files, each once: a file
// reached again through another hard link, under the same directory or one
// counted before, adds nothing. The zero value is ready to use.
type Counter struct {
	seen map[[2]uint64]bool
}

// Add walks dir and returns the bytes of the regular files under it that
// this Counter has not counted yet. Files deleted while it walks are
// skipped; a dir that does not exist counts 0.
func (c *Counter) Add(dir string) (int64, error) {
	if c.seen == nil {
		c.seen = map[[2]uint64]bool{}
	}
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if id, ok := inodeOf(info); ok {
			if c.seen[id] {
				return nil
			}
			c.seen[id] = true
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("disk use of %s: %w", dir, err)
	}
	return n, nil
}
