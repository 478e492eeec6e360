package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/client"
)

// runCLI runs app on args (the program name first) the way an operator
// expects: flags may follow arguments, a usage error (an unknown command or
// flag, a bad value) is one line, and an error answer of the API reads as
// its code and message once.
func runCLI(ctx context.Context, app *cli.App, args []string) error {
	app.OnUsageError = usageError
	for _, cmd := range app.Commands {
		for _, c := range append([]*cli.Command{cmd}, cmd.Subcommands...) {
			if c.OnUsageError == nil {
				c.OnUsageError = usageError
			}
		}
	}
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") && app.Command(args[1]) == nil && args[1] != "help" && args[1] != "h" {
		return fmt.Errorf("%s: unknown command %q (see %s --help)", app.Name, args[1], app.Name)
	}
	args, err := flagsFirst(app, args)
	if err != nil {
		return err
	}
	return cleanError(app.RunContext(ctx, args))
}

// flagsFirst moves the flags of a command that follow its arguments in
// front of them, since the flag package stops at the first argument: it
// turns `slot 12 --records` into `slot --records 12`. A flag that takes a
// value keeps the word after it; `--` ends the flags, and what follows it
// stays an argument even if it starts with a dash. A last flag missing its
// value is an error, since moved in front it would take an argument as one.
func flagsFirst(app *cli.App, args []string) ([]string, error) {
	if len(args) < 3 {
		return args, nil
	}
	cmd, head := app.Command(args[1]), 2
	if cmd != nil && len(cmd.Subcommands) > 0 {
		cmd, head = cmd.Command(args[2]), 3 // a subcommand's flags follow it
	}
	if cmd == nil || cmd.SkipFlagParsing || len(cmd.Subcommands) > 0 {
		return args, nil
	}
	var flags, positional, afterDash []string
	dashDash := false
	rest := args[head:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			dashDash, afterDash = true, rest[i+1:]
			i = len(rest)
		case len(a) < 2 || a[0] != '-':
			positional = append(positional, a)
		default:
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") || !takesValue(cmd, name) {
				continue
			}
			if i+1 == len(rest) {
				full := app.Name + " " + strings.Join(args[1:head], " ")
				return nil, fmt.Errorf("%s: --%s needs a value (see %s --help)", full, name, full)
			}
			i++
			flags = append(flags, rest[i])
		}
	}
	out := append(slices.Clone(args[:head]), flags...)
	if dashDash {
		out = append(out, "--")
	}
	return append(append(out, positional...), afterDash...), nil
}

// takesValue reports whether cmd has a flag named name that takes a value.
func takesValue(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				df, ok := f.(cli.DocGenerationFlag)
				return ok && df.TakesValue()
			}
		}
	}
	return false
}

var (
	// badValue matches the flag package's error for a value it cannot parse.
	badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): `)
	// unknownFlag and noValue match its errors for an unknown flag and a
	// flag missing its value.
	unknownFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	noValue     = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
)

// usageError turns a flag parsing error into one line naming the flag and
// what it wants, instead of the help text and the error twice.
func usageError(c *cli.Context, err error, _ bool) error {
	name := c.App.Name
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != name {
		name += " " + c.Command.Name
	}
	msg := err.Error()
	if m := badValue.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("--%s %q: %s", m[2], m[1], wantOf(c, m[2]))
	} else if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		msg = "unknown flag --" + m[1]
	} else if m := noValue.FindStringSubmatch(msg); m != nil {
		msg = "--" + m[1] + " needs a value"
	}
	return fmt.Errorf("%s: %s (see %s --help)", name, msg, name)
}

// wantOf says what kind of value flag name takes.
func wantOf(c *cli.Context, name string) string {
	var flags []cli.Flag
	if c.Command != nil {
		flags = c.Command.Flags
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			switch f.(type) {
			case *cli.DurationFlag:
				return "want a duration with a unit, e.g. 5s, 1500ms, 2h30m"
			case *cli.IntFlag, *cli.Int64Flag:
				return "want an integer"
			case *cli.BoolFlag:
				return "want true or false"
			}
		}
	}
	return "invalid value"
}

// cliError is an error as the command line prints it, wrapping the
// original for errors.Is and errors.As.
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// cleanError rewrites an error answer of the API in err as "code: message",
// without the status and with the code said once: the server's message
// often starts with it already ("conflict: message … is reserved"). A
// node that cannot be reached is named once, without the request.
func cleanError(err error) error {
	var ce *client.Error
	var ue *url.Error
	var said *cliError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &said):
		return err // already as the command line says it
	case errors.As(err, &ce):
		return &cliError{msg: strings.Replace(err.Error(), ce.Error(), apiMessage(ce), 1), err: err}
	case errors.As(err, &ue) && !errors.Is(err, context.Canceled):
		node := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			node = u.Scheme + "://" + u.Host
		}
		return &cliError{msg: fmt.Sprintf("cannot reach %s: %v", node, ue.Err), err: err}
	}
	return err
}

// apiMessage is the one-line text of an error answer.
func apiMessage(e *client.Error) string {
	if e.Code == "" {
		return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	}
	code := strings.ReplaceAll(e.Code, "_", " ")
	if strings.HasPrefix(e.Message, code+":") {
		return e.Message
	}
	return code + ": " + e.Message
}
