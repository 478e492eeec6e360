package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

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

// dumpCommand writes the replicated state of a stopped node's data
// directory: two replicas that applied the log up to the same index write
// the same dump, so comparing dumps checks that they agree.
func dumpCommand() *cli.Command {
	return &cli.Command{
		Name:      "dump",
		Usage:     "write the replicated state of a stopped node (of one group, --group), to compare replicas (same applied index, same dump)",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Required: true, Usage: "the stopped node's data directory"},
			groupFlag("dump"),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("dump takes no arguments, got %q", c.Args().Slice())
			}
			dir, err := groupDataDir(c)
			if err != nil {
				return err
			}
			st, err := openOfflineStore(dir)
			if err != nil {
				return err
			}
			err = st.Dump(c.App.Writer)
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}
}
