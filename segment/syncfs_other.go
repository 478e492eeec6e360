//go:build !linux

package segment

import (
	"errors"

	"github.com/cockroachdb/pebble/vfs"
)

// startWriteback is a no-op here: the pages wait for the next Sync.
func startWriteback(vfs.File) {}

// syncFilesystem is not available here; Sync falls back to an fsync per file.
func syncFilesystem(string) error { return errors.New("syncfs: not supported on this platform") }
