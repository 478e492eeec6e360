//go:build !linux

package segment

import "errors"

// syncFilesystem is not available here; Sync falls back to an fsync per file.
func syncFilesystem(string) error { return errors.New("syncfs: not supported on this platform") }
