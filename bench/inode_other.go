//go:build !unix

package bench

import "io/fs"

// inodeOf: hard links are not recognised here, so a size walk counts a
// linked file once per link.
func inodeOf(fs.FileInfo) (id [2]uint64, ok bool) { return id, false }
