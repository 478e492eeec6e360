//go:build unix

package diskuse

import (
	"io/fs"
	"syscall"
)

// inodeOf identifies a file with more than one hard link, so that a size
// walk counts its bytes once; ok is false for a file with one link.
func inodeOf(info fs.FileInfo) (id [2]uint64, ok bool) {
	st, isStat := info.Sys().(*syscall.Stat_t)
	if !isStat || st.Nlink < 2 {
		return id, false
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, true
}
