//go:build !unix

package diskuse

import "io/fs"

// inodeOf: hard links are not recognised here, so a Counter counts a
// linked file once per link.
func inodeOf(fs.FileInfo) (id [2]uint64, ok bool) { return id, false }
