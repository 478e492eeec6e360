package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// memberCommands returns the commands that change the cluster's
// membership, which only the HTTP API serves.
func memberCommands() []*cli.Command {
	return []*cli.Command{
		withHTTPFlags(&cli.Command{
			Name:      "remove-node",
			Usage:     "remove a member from the cluster (from every group), dead or alive; it then refuses requests",
			ArgsUsage: "ID",
			Description: "Removes the member before its machine goes: scale in by removing the highest node, then\n" +
				"stopping it. A removed node started again with --join asks to be added back.",
			Action: removeNode,
		}),
	}
}

// removeNode is DELETE /v1/cluster/nodes/{id}, through any member.
func removeNode(c *cli.Context) error {
	s, err := newSession(c, 1, 1)
	if err != nil {
		return err
	}
	id := c.Args().First()
	if err := s.cl.RemoveNode(c.Context, id); err != nil {
		return fmt.Errorf("removing %s: %w", id, err)
	}
	return s.print(func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", id) })
}
