package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/lizard-build/lizard/api"
)

func init() {
	register("exec", "run a command in a sandbox", runExec)
}

type execArgs struct {
	sandbox   string
	sendStdin bool
	req       api.ProcessRequest
	clientF   *clientFlags
}

// parseExec parses `lizard exec [flags] SANDBOX [--] CMD ARGS...`. Flags stop
// at SANDBOX so that the command's own flags (ls -l) are left alone.
func parseExec(e Env, args []string) (*execArgs, error) {
	fs := NewFlags(e, "exec")
	a := &execArgs{clientF: addClientFlags(fs)}
	envs := kvFlag{}
	var timeout durationFlag
	fs.StringVar(&a.req.Cwd, "cwd", "", "working directory (default /home/user)")
	fs.Var(envs, "env", "environment variable K=V (repeatable)")
	fs.Var(&timeout, "timeout", "kill the command after this long, such as 30s (default: no limit)")
	fs.BoolVar(&a.sendStdin, "stdin", false, "read all of standard input first and give it to the command")
	fs.Usage = func() {
		fmt.Fprintln(e.Stderr, "Usage: lizard exec [flags] SANDBOX -- CMD ARGS...")
		fs.PrintDefaults()
	}
	if err := Parse(fs, args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		// "lizard exec -- SANDBOX ..." is odd but unambiguous.
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return nil, Usagef("usage: lizard exec [flags] SANDBOX -- CMD ARGS...")
	}
	a.sandbox, rest = rest[0], rest[1:]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return nil, Usagef("no command to run: lizard exec [flags] SANDBOX -- CMD ARGS...")
	}
	a.req.Args = rest
	a.req.TimeoutMs = timeout.ms
	if len(envs) > 0 {
		a.req.Envs = envs
	}
	return a, nil
}

func runExec(ctx context.Context, e Env, args []string) error {
	a, err := parseExec(e, args)
	if err != nil {
		return err
	}
	if a.sendStdin {
		// The API takes stdin whole, not as a stream: read it all first.
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		a.req.Stdin = string(b)
	}
	c, err := a.clientF.client()
	if err != nil {
		return err
	}
	res, err := c.Exec(ctx, a.sandbox, a.req, func(ev api.ProcessEvent) {
		switch ev.Type {
		case "stdout":
			io.WriteString(e.Stdout, ev.Text)
		case "stderr":
			io.WriteString(e.Stderr, ev.Text)
		}
	})
	if err != nil {
		return fmt.Errorf("running command in sandbox %s: %w", a.sandbox, err)
	}
	return exitFor(res.ExitCode, res.Error)
}

// exitFor turns a command's outcome into what `lizard exec` exits with.
func exitFor(code int, failure string) error {
	if failure != "" {
		// The command did not start, or was stopped: say why, and still
		// exit non-zero with its code when there is one.
		if code <= 0 {
			code = 1
		}
		return fmt.Errorf("%s: %w", failure, exitError{code})
	}
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return exitError{1}
	}
	return exitError{code}
}
