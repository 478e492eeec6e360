package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

func backupCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:      "backup",
			Usage:     "take a consistent backup of a running node into a file (of every group, with --groups N)",
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
				"A backup of a node of many groups seeds every group; start the server with the same --groups.\n" +
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
	token, err := api.ReadTokenFile("--token-file", c.String("token-file"))
	if err != nil {
		return err
	}
	if err := httpOnly(c.String("addr"), "backup"); err != nil {
		return err
	}
	addr, err := pickHTTP(c.Context, c.String("addr"), false)
	if err != nil {
		return err
	}
	cl := client.New(baseURL(addr), client.WithToken(token))
	v, err := cl.Cluster(c.Context)
	if err != nil {
		return fmt.Errorf("learning the node's groups: %w", err)
	}
	groups := max(len(v.Groups), 1)
	out := c.String("out")
	// backup writes the node's backup into w: a single group's stream, or
	// the archive of every group's, spooled next to the output file.
	backup := func(w io.Writer) error {
		if groups == 1 {
			_, err := cl.Backup(c.Context, w)
			return err
		}
		tmpDir := ""
		if out != "-" {
			tmpDir = filepath.Dir(out)
		}
		return replication.WriteGroupsBackup(w, groups, tmpDir, func(g int, w io.Writer) error {
			_, err := cl.GroupBackup(c.Context, g, w)
			return err
		})
	}
	what := "backup"
	if groups > 1 {
		what = fmt.Sprintf("backup of %d groups", groups)
	}
	if out == "-" {
		if err := backup(c.App.Writer); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.ErrWriter, "%s written to stdout\n", what)
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	err = backup(f)
	var n int64
	if err == nil {
		n, err = f.Seek(0, io.SeekCurrent)
	}
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
	fmt.Fprintf(c.App.Writer, "%s written to %s (%d bytes)\n", what, out, n)
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
	res, err := replication.Restore(f, dir, c.String("node-id"), c.String("raft-addr"))
	if err != nil {
		return err
	}
	start := fmt.Sprintf("delaywheel server --data-dir %s --node-id %s --raft-addr %s", dir, c.String("node-id"), c.String("raft-addr"))
	if res.Groups == 1 {
		fmt.Fprintf(c.App.Writer, "restored %s into %s at log index %d; start: %s\n", c.Args().First(), dir, res.Indexes[0], start)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "restored %s into %s: %d groups at log indexes %v; start: %s --groups %d\n",
		c.Args().First(), dir, res.Groups, res.Indexes, start, res.Groups)
	return nil
}
