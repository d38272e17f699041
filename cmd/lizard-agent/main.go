// Command lizard-agent runs inside every sandbox, as its process 1: it
// serves the agent API on api.AgentPort and runs code as the sandbox user.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/internal/agent"
	"github.com/lizard-build/lizard/internal/agent/pid1"
	"github.com/lizard-build/lizard/internal/agent/sudo"
	"github.com/lizard-build/lizard/internal/version"
)

func main() {
	// The sandbox's sudo is this binary under that name
	// (internal/agent/sudo): a client of the agent, run by code as any
	// user, which must do nothing of the agent's own start.
	if filepath.Base(os.Args[0]) == "sudo" {
		os.Exit(sudo.Main(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lizard-agent:", err)
		var exit exitError
		if asExit(err, &exit) {
			os.Exit(int(exit))
		}
		os.Exit(1)
	}
}

// exitError carries the supervised agent's exit code out of run.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("agent exited with code %d", int(e)) }

func asExit(err error, target *exitError) bool {
	e, ok := err.(exitError)
	if ok {
		*target = e
	}
	return ok
}

func run(ctx context.Context, args []string) error {
	if len(args) == 2 && (args[1] == "--version" || args[1] == "-v" || args[1] == "version") {
		fmt.Println(version.Line("lizard-agent"))
		return nil
	}
	// Not dumpable: code running as root inside the sandbox (without
	// CAP_SYS_PTRACE) cannot open this process's /proc files. Its stdout
	// and stderr are the sandbox's console log on the host, which root
	// wrote through /proc/1/fd/2 past the agent's log budget and every
	// disk bound, and its environment holds its secret (a restored copy's,
	// that of the sandbox it was copied from). An exec makes a process
	// dumpable again: the supervisor and the agent each say so.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making the agent not dumpable: %w", err)
	}
	if pid1.ShouldSupervise() {
		if err := pid1.WriteResolvConf("/etc/resolv.conf"); err != nil {
			fmt.Fprintln(os.Stderr, "lizard-agent: writing /etc/resolv.conf:", err) // lookups fail; code still runs
		}
		code, err := pid1.Supervise(args[1:])
		if err != nil {
			return err
		}
		if code != 0 {
			return exitError(code)
		}
		return nil
	}
	os.Unsetenv(pid1.ChildEnv)
	cfg, err := agent.LoadConfig(args[1:], os.Getenv)
	if err != nil {
		return err
	}
	cfg.Version = version.Version
	cfg.Logger = agent.NewLogger(os.Stderr)
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
