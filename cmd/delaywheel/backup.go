package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport/client"
)

func backupCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:      "backup",
			Usage:     "take a consistent backup of a running node into a file",
			ArgsUsage: " ",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "addr", Value: "http://127.0.0.1:7070", Usage: "HTTP address of the node to back up", EnvVars: []string{"DELAYWHEEL_ADDR"}},
				&cli.StringFlag{Name: "token-file", Usage: "file holding the bearer token", EnvVars: []string{"DELAYWHEEL_TOKEN_FILE"}},
				&cli.StringFlag{Name: "out", Required: true, Usage: "`FILE` to write (written to FILE.tmp, then renamed); - writes to stdout"},
			},
			Action: runBackup,
		},
		{
			Name:      "restore",
			Usage:     "seed an empty data directory from a backup; then start the server on it",
			ArgsUsage: "FILE",
			Description: "Installs the backup as the node's Raft snapshot, with this node as the only voter.\n" +
				"Start `delaywheel server` with the same --data-dir, --node-id and --raft-addr;\n" +
				"other nodes then --join it to form a cluster.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "data-dir", Required: true, Usage: "empty data directory of the node to seed"},
				&cli.StringFlag{Name: "node-id", Value: "n1", Usage: "id the node will run with"},
				&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7071", Usage: "Raft address (advertised) the node will run with"},
			},
			Action: runRestore,
		},
	}
}

func runBackup(c *cli.Context) error {
	token, err := readToken(c.String("token-file"))
	if err != nil {
		return err
	}
	cl := client.New(baseURL(c.String("addr")), client.WithToken(token))
	out := c.String("out")
	if out == "-" {
		n, err := cl.Backup(c.Context, c.App.Writer)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.ErrWriter, "backup written to stdout (%d bytes)\n", n)
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	n, err := cl.Backup(c.Context, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "backup written to %s (%d bytes)\n", out, n)
	return nil
}

func runRestore(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("restore takes one argument, the backup file")
	}
	f, err := os.Open(c.Args().First())
	if err != nil {
		return err
	}
	defer f.Close()
	dir, err := filepath.Abs(c.String("data-dir"))
	if err != nil {
		return err
	}
	index, err := replication.RestoreBackup(f, dir, c.String("node-id"), c.String("raft-addr"))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "restored %s into %s at log index %d; start: delaywheel server --data-dir %s --node-id %s --raft-addr %s\n",
		c.Args().First(), dir, index, dir, c.String("node-id"), c.String("raft-addr"))
	return nil
}
