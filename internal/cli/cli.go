// Package cli implements the lizard command's client side: commands that
// talk to the API through the Go client, one file per subcommand. It links
// no server code (deps_test.go): the client-only build of the CLI is what
// every sandbox gets as /usr/local/bin/lizard. The server's own commands
// (serve, admin, template) come from package daemon and are added by
// cmd/lizard through Run's extra commands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// Env carries what every subcommand writes to.
type Env struct {
	Stdout, Stderr io.Writer
}

// Command is one subcommand.
type Command struct {
	Name, Summary string
	Run           func(ctx context.Context, e Env, args []string) error
}

var commands = map[string]Command{}

func register(name, summary string, run func(ctx context.Context, e Env, args []string) error) {
	commands[name] = Command{Name: name, Summary: summary, Run: run}
}

// usageError is a mistake in how the command was called.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// Usagef is a mistake in how a command was called: exit status 2.
func Usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

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
// extra are more commands, such as the server's.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, extra ...Command) error {
	e := Env{Stdout: stdout, Stderr: stderr}
	all := make(map[string]Command, len(commands)+len(extra))
	for n, c := range commands {
		all[n] = c
	}
	for _, c := range extra {
		all[c.Name] = c
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, all)
		return nil
	}
	if args[0] == "-v" || args[0] == "--version" {
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := all[args[0]]
	if !ok {
		usage(stderr, all)
		return Usagef("unknown command %q", args[0])
	}
	err := c.Run(ctx, e, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag package has printed the usage
	}
	return err
}

// Main runs the lizard command of this process's arguments, with extra
// commands beside the client's, until it ends or SIGINT/SIGTERM; it prints
// the error and exits with its status. cmd/lizard and cmd/lizard-client
// are this call.
func Main(extra ...Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, extra...)
	stop()
	if err != nil {
		if !Silent(err) {
			fmt.Fprintln(os.Stderr, "lizard:", err)
		}
		os.Exit(ExitCode(err))
	}
}

// Silent reports whether err needs no message of its own: a command run in a
// sandbox has already shown its output, and its exit code says the rest.
func Silent(err error) bool {
	var x exitError
	return errors.As(err, &x)
}

func usage(w io.Writer, commands map[string]Command) {
	fmt.Fprintln(w, "Usage: lizard COMMAND [ARGS]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-13s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nRun `lizard COMMAND -h` for a command's flags.")
}

// NewFlags returns a flag set that reports errors instead of exiting.
func NewFlags(e Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("lizard "+name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	return fs
}

// Parse parses args, turning flag errors into usage errors.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{strings.TrimSpace(err.Error())}
	}
	return nil
}
