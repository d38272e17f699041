// Package cli implements the lizard command: the server (`lizard serve`),
// administration, and a client for the API. One file per subcommand.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// env carries what every subcommand writes to.
type env struct {
	stdout, stderr io.Writer
}

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, e env, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

// usageError is a mistake in how the command was called.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// ExitCode maps an error from Run to the process exit status.
func ExitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	var x exitError
	if errors.As(err, &x) {
		return x.code
	}
	return 1
}

// exitError carries the exit code of a command run in a sandbox.
type exitError struct{ code int }

func (x exitError) Error() string { return fmt.Sprintf("command exited with status %d", x.code) }

// Run runs the lizard command with args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := env{stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return usagef("unknown command %q", args[0])
	}
	err := c.run(ctx, e, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag package has printed the usage
	}
	return err
}

// Silent reports whether err needs no message of its own: a command run in a
// sandbox has already shown its output, and its exit code says the rest.
func Silent(err error) bool {
	var x exitError
	return errors.As(err, &x)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: lizard COMMAND [ARGS]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun `lizard COMMAND -h` for a command's flags.")
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(e env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("lizard "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parse parses args, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{strings.TrimSpace(err.Error())}
	}
	return nil
}
