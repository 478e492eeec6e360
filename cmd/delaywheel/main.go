// Command delaywheel is the delaywheel binary: the server and the admin
// commands that talk to a node over HTTP or read a stopped node's data
// directory.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// main runs the command line with a context that ends at SIGINT or
// SIGTERM: the one signal handler of the process.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runCLI(ctx, newApp(), os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// newApp builds the command-line application.
func newApp() *cli.App {
	app := &cli.App{
		Name:  "delaywheel",
		Usage: "a replicated delay queue: messages come back at the millisecond they are due",
	}
	app.Commands = append([]*cli.Command{serverCommand()}, adminCommands(openOffline)...)
	app.Commands = append(app.Commands, backupCommands()...)
	app.Commands = append(app.Commands, dumpCommand())
	app.Commands = append(app.Commands, benchCommand())
	app.Commands = append(app.Commands, scheduleCommand())
	app.Commands = append(app.Commands, memberCommands()...)
	return app
}
