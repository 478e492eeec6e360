package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/delaywheel/delaywheel/wheel"
)

// openOffline adapts openOfflineStore to the admin commands.
func openOffline(dataDir string) (offlineReader, error) { return openOfflineStore(dataDir) }

// openOfflineStore opens a stopped node's store read-only, for `wheel` and
// `slot` with --data-dir. The store is the fsm directory of the data dir.
func openOfflineStore(dataDir string) (*wheel.Store, error) {
	dir := filepath.Join(dataDir, "fsm")
	if _, err := os.Stat(filepath.Join(dir, "index")); err != nil {
		return nil, fmt.Errorf("--data-dir %s holds no delaywheel store: %w", dataDir, err)
	}
	st, err := wheel.Open(dir, wheel.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open %s (is the node still running?): %w", dir, err)
	}
	return st, nil
}
